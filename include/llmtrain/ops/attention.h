// Causal scaled-dot-product self-attention over heads, the core of CausalSelfAttention.
#pragma once

#include <ATen/core/Tensor.h>

namespace llmtrain::ops {

/// softmax(q k^T / sqrt(D) + causal mask) v, with dropout on the attention weights when
/// dropout_p > 0. Position t attends to positions 0..t only.
///   auto y = llmtrain::ops::attention(q, k, v);  // (B, H, T, D)
at::Tensor attention(const at::Tensor& q,  // (B, H, T, D)
                     const at::Tensor& k,  // (B, H, T, D)
                     const at::Tensor& v,  // (B, H, T, D)
                     double dropout_p = 0.0);

}  // namespace llmtrain::ops
