#include "llmtrain/ops/attention.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <cstdio>
#include <mutex>
#include <optional>
#include <string>

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
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2), KV = k.dim() == 4 ? k.size(1) : 0;
  LLMTRAIN_CHECK(k.dim() == 4 && k.size(0) == B && KV > 0 && H % KV == 0 && k.size(2) == T && k.size(3) == q.size(3) &&
                     v.sizes() == k.sizes(),
                 "attention: k and v must be (", B, ", KV, ", T, ", ", q.size(3), ") with KV dividing q's ", H,
                 " heads, got k ", k.sizes(), " and v ", v.sizes());
  LLMTRAIN_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, "attention: dropout_p must be in [0, 1), got ", dropout_p);
  if (!mask.defined()) {
#if LLMTRAIN_WITH_CUDA
    if (q.is_cuda() && cuda_kernel_enabled(Kernel::kAttention)) {
      if (dropout_p == 0.0 && cuda::flash_attention_supported(q, k, v))
        return cuda::flash_attention(q, k, v, cuda_kernel_enabled(Kernel::kAttentionFp8));
      static std::once_flag said;
      std::call_once(said, [&] {
        std::fprintf(stderr,
                     "llmtrain: attention: the Hopper kernels take bf16 heads of 64 or 128 on a GPU of compute "
                     "capability 9.0, D contiguous and 16-byte aligned, without dropout; %s heads of %lld (dropout "
                     "%g) run on ATen's SDPA (said once)\n",
                     std::string(c10::toString(q.scalar_type())).c_str(), static_cast<long long>(q.size(3)), dropout_p);
      });
    }
#endif
    // grouped heads: ATen's flash backend reads each key/value head for its group
    return at::scaled_dot_product_attention(q, k, v, /*attn_mask=*/{}, dropout_p, /*is_causal=*/true,
                                            /*scale=*/std::nullopt, /*enable_gqa=*/KV != H);
  }
  LLMTRAIN_CHECK(mask.dim() == 4 && mask.size(0) == B && mask.size(1) == 1 && mask.size(2) == T && mask.size(3) == T &&
                     mask.scalar_type() == at::kBool && mask.device() == q.device(),
                 "attention: mask must be (", B, ", 1, ", T, ", ", T, ") bool on ", q.device(), ", got ", mask.sizes(),
                 " ", mask.scalar_type(), " on ", mask.device());
  // The masked (memory-efficient) backend takes no grouped heads: each serves H / KV query heads in a row.
  const at::Tensor kr = KV == H ? k : k.repeat_interleave(H / KV, 1), vr = KV == H ? v : v.repeat_interleave(H / KV, 1);
  return at::scaled_dot_product_attention(q, kr, vr, mask, dropout_p, /*is_causal=*/false);
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

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  LLMTRAIN_CHECK(x.dim() == 4 && x.size(3) % 2 == 0, "rotary: x must be (B, T, heads, D) with D even, got ", x.sizes());
  const int64_t B = x.size(0), T = x.size(1), half = x.size(3) / 2;
  for (const at::Tensor* table : {&cos, &sin})
    LLMTRAIN_CHECK(table->dim() == 3 && (table->size(0) == B || table->size(0) == 1) && table->size(1) == T &&
                       table->size(2) == half && table->scalar_type() == at::kFloat && table->device() == x.device(),
                   "rotary: cos and sin must be (", B, " or 1, ", T, ", ", half, ") float32 on ", x.device(), " for x ",
                   x.sizes(), ", got ", table->sizes(), " ", table->scalar_type(), " on ", table->device());
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kRotary) && cuda::rotary_supported(x)) return cuda::rotary(x, cos, sin);
#endif
  // transformers: x * cos + rotate_half(x) * sin with the tables cast to x's dtype; per half, the same sums.
  const at::Tensor c = cos.to(x.scalar_type()).unsqueeze(2), s = sin.to(x.scalar_type()).unsqueeze(2);
  const auto halves = x.chunk(2, -1);
  return at::cat({halves[0] * c - halves[1] * s, halves[1] * c + halves[0] * s}, -1);
}

std::pair<at::Tensor, at::Tensor> rotary_tables(const at::Tensor& positions, const at::Tensor& inv_freq) {
  LLMTRAIN_CHECK(positions.dim() == 2 && positions.scalar_type() == at::kLong,
                 "rotary_tables: positions must be (B, T) int64, got ", positions.sizes(), " ",
                 positions.scalar_type());
  LLMTRAIN_CHECK(inv_freq.dim() == 1 && inv_freq.scalar_type() == at::kFloat,
                 "rotary_tables: inv_freq must be (D / 2) float32, got ", inv_freq.sizes(), " ",
                 inv_freq.scalar_type());
  const at::Tensor angles = positions.to(at::kFloat).unsqueeze(-1) * inv_freq.to(positions.device());
  return {angles.cos(), angles.sin()};
}

at::Tensor decode_attention(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& positions, int64_t window, const at::Tensor& inv_freq) {
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
  LLMTRAIN_CHECK(!inv_freq.defined() || (inv_freq.dim() == 1 && inv_freq.size(0) * 2 == D &&
                                         inv_freq.scalar_type() == at::kFloat && inv_freq.device() == qkv.device()),
                 "decode_attention: inv_freq must be (", D / 2, ") float32 on ", qkv.device(), ", got ",
                 inv_freq.sizes(), " ", inv_freq.scalar_type(), " on ", inv_freq.device());
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kDecodeAttention) && cuda::decode_attention_supported(qkv, k_cache, v_cache))
    return cuda::decode_attention(qkv, k_cache, v_cache, positions, window, inv_freq);
#endif
  if (!positions.is_cuda() && B > 0) {
    const int64_t lo = positions.min().item<int64_t>(), hi = positions.max().item<int64_t>();
    LLMTRAIN_CHECK(lo >= 0 && hi < S, "decode_attention: positions must lie in [0, ", S,
                   "), the cache's length; they span [", lo, ", ", hi, "]");
  }
  at::Tensor rows = qkv;
  if (inv_freq.defined()) {  // q and the new k rotated at the row's position, v as it is
    const auto [cos, sin] = rotary_tables(positions.view({B, 1}), inv_freq);
    const auto turn = [&](int64_t at, int64_t n) {
      return rotary(qkv.narrow(1, at * D, n * D).view({B, 1, n, D}), cos, sin).view({B, n * D});
    };
    rows = at::cat({turn(0, H + KV), qkv.narrow(1, (H + KV) * D, KV * D)}, 1);
  }
  const auto heads = [&](int64_t at, int64_t n) { return rows.narrow(1, at * D, n * D).view({B, n, 1, D}); };
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
