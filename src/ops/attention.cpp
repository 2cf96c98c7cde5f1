#include "llmtrain/ops/attention.h"

#include <ATen/ATen.h>

#include "llmtrain/core/error.h"

namespace llmtrain::ops {

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p) {
  LLMTRAIN_CHECK(q.dim() == 4, "attention: q must be (B, H, T, D), got ", q.sizes());
  LLMTRAIN_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(),
                 "attention: k and v must match q ", q.sizes(), ", got k ", k.sizes(), " and v ",
                 v.sizes());
  LLMTRAIN_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "attention: dropout_p must be in [0, 1), got ",
                 dropout_p);
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, /*is_causal=*/true);
}

}  // namespace llmtrain::ops
