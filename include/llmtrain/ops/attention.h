// Causal scaled-dot-product self-attention over heads, the core of CausalSelfAttention: over a whole
// sequence (training, and the prompt when generating), and one decoding step against a KV cache.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace llmtrain::ops {

/// softmax(q k^T / sqrt(D) + mask) v, with dropout on the attention weights when dropout_p > 0.
/// Without `mask` the mask is causal: position t attends to positions 0..t. With one (document_mask's
/// (B, 1, T, T) bool, true where query t may attend to key s) it replaces the causal mask; on CUDA it
/// runs as a masked (memory-efficient) attention. Without a mask, bf16 heads of 64 or 128 on a Hopper
/// GPU can run on llmtrain's own kernels (kernels/attention; the "attention" switch, off by default;
/// with "attention_fp8" also on, their forward's products run in fp8, about 4.5% of the output's norm
/// from the exact attention against bf16's 0.3%), others on ATen's scaled_dot_product_attention.
/// Grouped-query attention: k and v may have KV heads, KV dividing H, each serving H / KV query heads in
/// a row (transformers' repeat_kv).
///   auto y = llmtrain::ops::attention(q, k, v);  // (B, H, T, D)
at::Tensor attention(const at::Tensor& q,  // (B, H, T, D)
                     const at::Tensor& k,  // (B, KV, T, D)
                     const at::Tensor& v,  // (B, KV, T, D)
                     double dropout_p = 0.0, const at::Tensor& mask = {});

/// The causal mask of windows that hold several documents one after another (packed fine-tuning
/// examples): `positions` (B, T) int64 is each token's position in its document, and a document
/// starts wherever its position is 0. Query t attends to key s when s <= t and both lie in one
/// document (s >= t - positions[t]). Returns (B, 1, T, T) bool on positions' device.
///   auto mask = llmtrain::ops::document_mask(positions);  // block-diagonal and causal
at::Tensor document_mask(const at::Tensor& positions);

/// The rotary position embedding (RoPE) of the Llama family: in every head of x, channel i < D / 2 and
/// channel i + D / 2 are rotated as a pair by the token's angle for i, (x1, x2) -> (x1 c - x2 s,
/// x2 c + x1 s) with c, s = cos, sin[b, t, i] (tables of one row serve every row). On CUDA (float32,
/// bf16, fp16; D / 2 a whole number of 16-byte packs) the kernel of kernels/rotary.cu, forward and
/// backward, float32 math and one rounding; elsewhere ATen with the tables in x's dtype, computing
/// what transformers' apply_rotary_pos_emb computes.
///   auto q = llmtrain::ops::rotary(q_proj(x).view({B, T, H, D}), cos, sin);
at::Tensor rotary(const at::Tensor& x,    // (B, T, heads, D)
                  const at::Tensor& cos,  // (B or 1, T, D / 2) float32
                  const at::Tensor& sin);

/// rotary's tables for positions (B, T) int64 and the frequencies inv_freq (D / 2) float32: the angles
/// positions[b, t] * inv_freq[i] in float32, as transformers derives them; {cos, sin}, (B, T, D / 2).
std::pair<at::Tensor, at::Tensor> rotary_tables(const at::Tensor& positions, const at::Tensor& inv_freq);

/// One decoding step, a new token per row at a position of its own: row b's key and value (from qkv,
/// the row's [q | k | v]: H query heads of D, then KV key heads and KV value heads) are written into the
/// caches at positions[b], and its query attends to the row's positions 0..positions[b], or with
/// `window` > 0 (Mistral's sliding window) to the last `window` of them. Grouped-query attention: KV
/// divides H and each key/value head serves H / KV query heads in a row (GPT-2: KV = H). Returns
/// (B, H D). With `inv_freq` (D / 2 float32) the query and the new key are first rotated as
/// ops::rotary rotates them at positions[b] (the Llama family), and the key is cached rotated.
/// Inference only (no backward). Positions must lie in [0, S): checked on the CPU; on CUDA, where
/// checking would make the host wait, a row outside gets NaN from the kernel (the caller keeps them in
/// range).
///   auto y = llmtrain::ops::decode_attention(qkv, cache_k, cache_v, positions);
at::Tensor decode_attention(const at::Tensor& qkv,        // (B, (H + 2 KV) D)
                            const at::Tensor& k_cache,    // (B, KV, S, D), written at positions
                            const at::Tensor& v_cache,    // (B, KV, S, D), written at positions
                            const at::Tensor& positions,  // (B) int64
                            int64_t window = 0, const at::Tensor& inv_freq = {});  // (D / 2) float32, or undefined

}  // namespace llmtrain::ops
