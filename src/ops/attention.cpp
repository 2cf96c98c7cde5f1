#include "llmtrain/ops/attention.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#if LLMTRAIN_WITH_CUDA
#include "attention_cuda.h"
#endif

namespace llmtrain::ops {

at::Tensor attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, double dropout_p,
                     const at::Tensor& mask) {
  LLMTRAIN_CHECK(q.dim() == 4, "attention: q must be (B, H, T, D), got ", q.sizes());
  LLMTRAIN_CHECK(k.sizes() == q.sizes() && v.sizes() == q.sizes(), "attention: k and v must match q ", q.sizes(),
                 ", got k ", k.sizes(), " and v ", v.sizes());
  LLMTRAIN_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "attention: dropout_p must be in [0, 1), got ", dropout_p);
  if (!mask.defined())
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, /*is_causal=*/true);
  const int64_t B = q.size(0), T = q.size(2);
  LLMTRAIN_CHECK(mask.dim() == 4 && mask.size(0) == B && mask.size(1) == 1 && mask.size(2) == T && mask.size(3) == T &&
                     mask.scalar_type() == at::kBool && mask.device() == q.device(),
                 "attention: mask must be (", B, ", 1, ", T, ", ", T, ") bool on ", q.device(), ", got ", mask.sizes(),
                 " ", mask.scalar_type(), " on ", mask.device());
  return at::scaled_dot_product_attention(q, k, v, mask, dropout_p, /*is_causal=*/false);
}

at::Tensor document_mask(const at::Tensor& positions) {
  LLMTRAIN_CHECK(positions.dim() == 2 && positions.scalar_type() == at::kLong,
                 "document_mask: positions must be (B, T) int64, got ", positions.sizes(), " ",
                 positions.scalar_type());
  const int64_t T = positions.size(1);
  const at::Tensor t = at::arange(T, positions.options());  // (T)
  const at::Tensor query = t.view({1, T, 1}), key = t.view({1, 1, T});
  const at::Tensor first = (t.view({1, T}) - positions).unsqueeze(2);  // (B, T, 1): where t's document starts
  return key.le(query).logical_and(key.ge(first)).unsqueeze(1);        // (B, 1, T, T)
}

at::Tensor decode_attention(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& positions, int64_t window) {
  LLMTRAIN_CHECK(k_cache.dim() == 4 && v_cache.sizes() == k_cache.sizes(),
                 "decode_attention: k_cache and v_cache must be one (B, KV, S, D) shape, got ", k_cache.sizes(),
                 " and ", v_cache.sizes());
  const int64_t B = k_cache.size(0), KV = k_cache.size(1), S = k_cache.size(2), D = k_cache.size(3);
  const int64_t H = qkv.dim() == 2 && D > 0 && qkv.size(1) % D == 0 ? qkv.size(1) / D - 2 * KV : 0;
  LLMTRAIN_CHECK(qkv.dim() == 2 && qkv.size(0) == B && KV > 0 && H >= KV && H % KV == 0,
                 "decode_attention: qkv must be (", B, ", (H + 2 x ", KV, ") x ", D,
                 ") with H a multiple of the caches' ", KV, " heads, for caches ", k_cache.sizes(), ", got ",
                 qkv.sizes());
  LLMTRAIN_CHECK(window >= 0, "decode_attention: window must be >= 0 (0: none), got ", window);
  LLMTRAIN_CHECK(positions.dim() == 1 && positions.size(0) == B && positions.scalar_type() == at::kLong,
                 "decode_attention: positions must be (", B, ") int64, got ", positions.sizes(), " ",
                 positions.scalar_type());
  LLMTRAIN_CHECK(qkv.scalar_type() == k_cache.scalar_type() && v_cache.scalar_type() == k_cache.scalar_type(),
                 "decode_attention: qkv (", qkv.scalar_type(), ") and the caches (", k_cache.scalar_type(), ", ",
                 v_cache.scalar_type(), ") must share a dtype");
  LLMTRAIN_CHECK(qkv.device() == k_cache.device() && v_cache.device() == k_cache.device() &&
                     positions.device() == k_cache.device(),
                 "decode_attention: qkv, caches and positions must be on one device, got ", qkv.device(), ", ",
                 k_cache.device(), ", ", v_cache.device(), " and ", positions.device());
  LLMTRAIN_CHECK(!at::GradMode::is_enabled() || !qkv.requires_grad(),
                 "decode_attention has no backward; call it under torch::NoGradGuard");
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kDecodeAttention) && cuda::decode_attention_supported(qkv, k_cache, v_cache))
    return cuda::decode_attention(qkv, k_cache, v_cache, positions, window);
#endif
  if (!positions.is_cuda() && B > 0) {
    const int64_t lo = positions.min().item<int64_t>(), hi = positions.max().item<int64_t>();
    LLMTRAIN_CHECK(lo >= 0 && hi < S, "decode_attention: positions must lie in [0, ", S,
                   "), the cache's length; they span [", lo, ", ", hi, "]");
  }
  const auto heads = [&](int64_t at, int64_t n) { return qkv.narrow(1, at * D, n * D).view({B, n, 1, D}); };
  const at::Tensor at_pos = positions.view({B, 1, 1, 1}).expand({B, KV, 1, D});
  k_cache.scatter_(2, at_pos, heads(H, KV));
  v_cache.scatter_(2, at_pos, heads(H + KV, KV));
  const at::Tensor s = at::arange(S, positions.options()).view({1, S}), p = positions.view({B, 1});
  at::Tensor mask = s.le(p);  // (B, S)
  if (window > 0) mask = mask.logical_and(s.gt(p - window));
  // Each key/value head serves H / KV query heads in a row (grouped-query attention).
  const at::Tensor k = KV == H ? k_cache : k_cache.repeat_interleave(H / KV, 1);
  const at::Tensor v = KV == H ? v_cache : v_cache.repeat_interleave(H / KV, 1);
  return at::scaled_dot_product_attention(heads(0, H), k, v, mask.view({B, 1, 1, S})).view({B, H * D});
}

}  // namespace llmtrain::ops
