// 8-bit weights, LLM.int8-style rows, as a frozen base's storage: each row of the weight scaled by its
// absolute maximum to [-127, 127] and rounded to an int8 (bitsandbytes' int8_vectorwise_quant without
// an outlier threshold; an all-zero row stays zero). Dequantized: code * absmax * (1 / 127) in float32,
// as bitsandbytes' int8_vectorwise_dequant, then rounded once to the dtype asked for. Half of bf16's
// memory at about 1/254 of each row's largest value as error; the products run in the input's dtype
// on the dequantized weight (weight-only quantization: no int8 matrix products).
#pragma once

#include <ATen/core/Tensor.h>

namespace llmtrain::ops {

/// A quantized (out, in) weight; its tensors live on one device.
struct Int8Weight {
  at::Tensor codes;   // (out, in) int8
  at::Tensor absmax;  // (out) float32, each row's absolute maximum
};

/// `w` (out, in), floating, any device, in int8 rows. Throws llmtrain::Error for a tensor that is not a
/// non-empty floating matrix or holds a value that is not finite (named).
///   auto q = llmtrain::ops::int8_quantize(layer->weight);
Int8Weight int8_quantize(const at::Tensor& w);

/// The weight again, in `dtype`, on the tensors' device.
at::Tensor int8_dequantize(const Int8Weight& q, at::ScalarType dtype);

/// x W^T + b for the int8 weight W of a frozen layer, in x's dtype (under autocast, its dtype): W
/// dequantized for the product, and again for the input's gradient, never kept.
///   auto y = llmtrain::ops::int8_linear(x, q, bias);
at::Tensor int8_linear(const at::Tensor& x, const Int8Weight& q, const at::Tensor& bias = {});

}  // namespace llmtrain::ops
