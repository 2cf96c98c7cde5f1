// Layer normalisation over the last dimension, the call GPT-2's blocks make, alone and fused with the
// residual add before it. One function for every device: CPU tensors take the ATen reference path; the
// fused CUDA kernels sit behind the same calls.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace llmtrain::ops {

/// y = (x - mean) / sqrt(var + eps) * weight + bias, statistics over the last dimension. Under CUDA
/// autocast a bf16/fp16 x is normalised in float32 and y is float32, as ATen's autocast does.
///   auto y = llmtrain::ops::layer_norm(x, ln->weight, ln->bias);
at::Tensor layer_norm(const at::Tensor& x,       // (..., C)
                      const at::Tensor& weight,  // (C)
                      const at::Tensor& bias,    // (C)
                      double eps = 1e-5);

/// The residual add of a pre-norm block fused with the layer norm after it: {h, layer_norm(h)} with
/// h = x + delta (in their promoted dtype). With delta undefined, h is x and this is layer_norm(x).
///   auto [h, y] = llmtrain::ops::add_layer_norm(x, attn_out, ln->weight, ln->bias);
std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x,       // (..., C)
                                                 const at::Tensor& delta,   // x's shape, or undefined
                                                 const at::Tensor& weight,  // (C)
                                                 const at::Tensor& bias,    // (C)
                                                 double eps = 1e-5);

}  // namespace llmtrain::ops
