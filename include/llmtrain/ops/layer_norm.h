// Layer normalisation over the last dimension, the call GPT-2's blocks make. One function for every
// device: CPU tensors take the ATen reference path; the fused CUDA kernel sits behind the same call.
#pragma once

#include <ATen/core/Tensor.h>

namespace llmtrain::ops {

/// y = (x - mean) / sqrt(var + eps) * weight + bias, statistics over the last dimension.
///   auto y = llmtrain::ops::layer_norm(x, ln->weight, ln->bias);
at::Tensor layer_norm(const at::Tensor& x,       // (..., C)
                      const at::Tensor& weight,  // (C)
                      const at::Tensor& bias,    // (C)
                      double eps = 1e-5);

}  // namespace llmtrain::ops
