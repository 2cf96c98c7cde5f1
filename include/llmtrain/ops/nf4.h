// 4-bit NormalFloat (NF4) weights, QLoRA's storage for a frozen base, in bitsandbytes' layout
// (quantize_4bit with quant_type nf4, blocksize 64, compress_statistics): each block of 64 values of
// the flattened weight is scaled by its absolute maximum and each value stored as the index of the
// nearest of NF4's 16 levels, two a byte, the first in the high nibble. The blocks' absmaxes are
// quantized again ("double quantization"): less their mean (offset), in blocks of 256, each scaled by
// its own absolute maximum and stored as the nearest of the 256 values of the signed 8-bit dynamic
// map. Dequantized: level[code] * (dynamic[absmax_code] * absmax2 + offset), in float32, then rounded
// once to the dtype asked for.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "llmtrain/ops/blockwise.h"  // dynamic_map, the absmaxes' map

namespace llmtrain::ops {

constexpr int64_t kNF4Block = 64;         // values per absmax
constexpr int64_t kNF4AbsmaxBlock = 256;  // absmaxes per second-level scale

/// A quantized weight; its tensors live on one device.
struct NF4Weight {
  at::Tensor packed;        // (ceil(numel / 2)) uint8
  at::Tensor absmax_codes;  // (blocks) uint8, blocks = ceil(numel / 64)
  at::Tensor absmax2;       // (ceil(blocks / 256)) float32
  double offset = 0;        // the mean of the first-level absmaxes
  std::vector<int64_t> shape;
  int64_t numel() const;
};

/// NF4's 16 levels in [-1, 1] (float32, on the CPU): the QLoRA paper's quantiles of a normal
/// distribution, as bitsandbytes tabulates them.
const at::Tensor& nf4_levels();

/// `w` (any shape, floating, any device) in NF4. Throws llmtrain::Error for an empty or non-floating
/// tensor or one with a non-finite value (named).
///   auto q = llmtrain::ops::nf4_quantize(layer->weight);
NF4Weight nf4_quantize(const at::Tensor& w);

/// The weight again, in `dtype`, on the tensors' device.
at::Tensor nf4_dequantize(const NF4Weight& q, at::ScalarType dtype);

/// x W^T + b for the NF4 weight W (out, in) of a frozen layer, in x's dtype (under autocast, its
/// dtype): W dequantized for the product, and again for the input's gradient, never kept (the
/// memory QLoRA saves). bias (out) or undefined.
///   auto y = llmtrain::ops::nf4_linear(x, q, bias);
at::Tensor nf4_linear(const at::Tensor& x, const NF4Weight& q, const at::Tensor& bias = {});

}  // namespace llmtrain::ops
