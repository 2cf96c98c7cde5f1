#include "llmtrain/ops/attention.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"

namespace llmtrain::ops {

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p) {
  LLMTRAIN_CHECK(q.dim() == 4, "attention: q must be (B, H, T, D), got ", q.sizes());
  LLMTRAIN_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(),
                 "attention: k and v must match q ", q.sizes(), ", got k ", k.sizes(), " and v ",
                 v.sizes());
  LLMTRAIN_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "attention: dropout_p must be in [0, 1), got ",
                 dropout_p);
#if LLMTRAIN_WITH_CUDA
  // cuDNN's fused attention: 0.64 ms against the flash backend's 0.83 (ATen's first choice) for GPT-2
  // 124M's layer on the H200 (benchmarks/bench_kernels), forward and backward. ATen tries it last.
  const auto t = q.scalar_type();
  const int64_t D = q.size(-1);
  if (cuda_kernel_enabled("attention") && q.is_cuda() && (t == at::kBFloat16 || t == at::kHalf) && k.scalar_type() == t &&
      v.scalar_type() == t && dropout_p == 0.0 && D % 8 == 0 && D <= 128 && q.stride(-1) == 1 && k.stride(-1) == 1 &&
      v.stride(-1) == 1)
    return std::get<0>(at::_scaled_dot_product_cudnn_attention(q, k, v, /*attn_bias=*/std::nullopt,
                                                                /*compute_log_sumexp=*/at::GradMode::is_enabled(),
                                                                dropout_p, /*is_causal=*/true));
#endif
  return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, /*is_causal=*/true);
}

}  // namespace llmtrain::ops
