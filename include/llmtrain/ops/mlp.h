// GPT-2's MLP. By default two ATen linear layers around ops::gelu. With the "mlp" kernel switched on
// (ops/dispatch.h) the layers are cuBLASLt products whose epilogues do the work around them: the bias
// adds and GELU in forward (the pre-activation written alongside, for backward), GELU's gradient and
// the first layer's bias gradient inside the second layer's input-gradient product in backward, so GELU
// costs no pass of its own; correct, but on the H200 slower than ATen's products (1.02 against 0.87
// ms for GPT-2 124M's layer), hence off. Under CUDA autocast the operands are cast as ATen's autocast
// casts a linear's (weights through its cache).
#pragma once

#include <ATen/core/Tensor.h>

namespace llmtrain::ops {

/// gelu(x fc_weight^T + fc_bias) proj_weight^T + proj_bias, GELU with the tanh approximation.
///   auto y = llmtrain::ops::mlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias);
at::Tensor mlp(const at::Tensor& x,                                          // (..., C)
               const at::Tensor& fc_weight, const at::Tensor& fc_bias,       // (H, C), (H)
               const at::Tensor& proj_weight, const at::Tensor& proj_bias);  // (C, H), (C)

}  // namespace llmtrain::ops
