// GPT-2's MLP. On CUDA its two linear layers are cuBLASLt products whose epilogues do the work
// around them: the bias adds and GELU in forward (the pre-activation written alongside, for backward),
// GELU's gradient and the first layer's bias gradient inside the second layer's input-gradient product
// in backward. So GELU costs no pass of its own over the (B, T, 4C) activations. Elsewhere, or for
// shapes those products do not take, the same math on ATen. Under CUDA autocast the operands are cast
// as ATen's autocast casts a linear's (weights through its cache).
#pragma once

#include <ATen/core/Tensor.h>

namespace llmtrain::ops {

/// gelu(x fc_weight^T + fc_bias) proj_weight^T + proj_bias, GELU with the tanh approximation.
///   auto y = llmtrain::ops::mlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias);
at::Tensor mlp(const at::Tensor& x,                                         // (..., C)
               const at::Tensor& fc_weight, const at::Tensor& fc_bias,      // (H, C), (H)
               const at::Tensor& proj_weight, const at::Tensor& proj_bias);  // (C, H), (C)

}  // namespace llmtrain::ops
