// A linear layer, y = x W^T + b. On CUDA tensors with a bias (the "linear" kernel switch of
// ops/dispatch.h on) it runs on packed rows flattened to one matrix, with ATen's product and bias
// epilogue forward, ATen's product for dx, and the bias gradient folded into the weight gradient's
// cuBLASLt product (no column-sum pass over dy); weight gradients come out contiguous. Elsewhere it is
// at::linear. Under CUDA autocast the operands are cast as ATen's autocast casts a linear's.
#pragma once

#include <ATen/core/Tensor.h>

namespace llmtrain::ops {

/// x (..., in), weight (out, in), bias (out) or undefined -> (..., out).
///   auto qkv = llmtrain::ops::linear(x, c_attn->weight, c_attn->bias);
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

}  // namespace llmtrain::ops
