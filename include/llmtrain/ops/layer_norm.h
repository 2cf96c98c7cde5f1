// Layer normalisation (GPT-2's) and RMSNorm (the Llama family's) over the last dimension, each alone and
// fused with the residual add before it. One function for every device: CPU tensors take the ATen reference path; the
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

/// RMSNorm as transformers' LlamaRMSNorm computes it: x normalised in float32, x / sqrt(mean(x^2) +
/// eps), rounded to x's dtype, times weight (the result in their promoted dtype). On CUDA with weight
/// of x's dtype, the layer norm kernels without a bias (one rounding, forward and backward).
///   auto y = llmtrain::ops::rms_norm(x, norm->weight, 1e-5);
at::Tensor rms_norm(const at::Tensor& x,       // (..., C)
                    const at::Tensor& weight,  // (C)
                    double eps);

/// {h, rms_norm(h)} with h = x + delta (in their promoted dtype); with delta undefined, h is x.
///   auto [h, y] = llmtrain::ops::add_rms_norm(x, attn_out, norm->weight, 1e-5);
std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x,      // (..., C)
                                               const at::Tensor& delta,  // x's shape, or undefined
                                               const at::Tensor& weight, double eps);

}  // namespace llmtrain::ops
