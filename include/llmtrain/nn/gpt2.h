// GPT-2 as a LibTorch module. Parameter names are Hugging Face's (transformer.h.N.attn.c_attn.weight
// ...), so checkpoints map across by name; Linear weights are stored (out, in) where Hugging Face's
// Conv1D stores (in, out). The token embedding is padded to a multiple of 128 rows so the classifier
// matmul stays aligned; the padded rows stay zero and their logits are cut off, never predicted. The
// head is tied to the token embedding (no separate lm_head parameter).
#pragma once

#include <torch/arg.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "llmtrain/nn/causal_lm.h"
#include "llmtrain/nn/gpt2_config.h"
#include "llmtrain/ops/embedding.h"

namespace llmtrain::nn {

/// Keys and values a GPT2 keeps between calls when it generates token by token: per layer, (B, H,
/// capacity, D) in the model's dtype. GPT2::prefill writes the prompts' positions, GPT2::decode one
/// more position per row at each step; infer::Generator owns one.
///   llmtrain::nn::KVCache cache(model->cfg, 4, 1024, torch::kBFloat16, torch::kCUDA);
struct KVCache {
  KVCache() = default;
  KVCache(const GPT2Config& cfg, int64_t batch, int64_t capacity, torch::ScalarType dtype, torch::Device device);
  int64_t batch() const { return k.empty() ? 0 : k[0].size(0); }
  int64_t capacity() const { return k.empty() ? 0 : k[0].size(2); }

  std::vector<torch::Tensor> k, v;  // n_layer each
};

/// One layer's view of a KVCache for a forward: a prefill (positions undefined) stores the keys and
/// values of positions [0, T); a decode step (positions (B) int64, T = 1) stores row b's at
/// positions[b] and attends over the row's 0..positions[b].
struct LayerCache {
  torch::Tensor k, v;       // (B, H, capacity, D)
  torch::Tensor positions;  // (B) int64, or undefined
};

/// Multi-head causal self-attention: c_attn (C -> 3C), attention over heads, c_proj (C -> C).
///   CausalSelfAttention attn(cfg); auto y = attn(x);  // (B, T, C) -> (B, T, C)
class CausalSelfAttentionImpl : public torch::nn::Cloneable<CausalSelfAttentionImpl> {
 public:
  explicit CausalSelfAttentionImpl(GPT2Config cfg);
  void reset() override;
  /// `cache`: a prefill's, whose keys and values are stored there (a decode step goes through
  /// Block::decode_residual). `mask`: ops::attention's (packed documents), undefined: causal.
  torch::Tensor forward(const torch::Tensor& x, const LayerCache* cache = nullptr,
                        const torch::Tensor& mask = {});  // (B, T, C) -> (B, T, C)

  GPT2Config cfg;
  torch::nn::Linear c_attn{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(CausalSelfAttention);

/// The feed-forward part of a block: c_fc (C -> 4C), tanh GELU, c_proj (4C -> C).
///   MLP mlp(cfg); auto y = mlp(x);  // (B, T, C) -> (B, T, C)
class MLPImpl : public torch::nn::Cloneable<MLPImpl> {
 public:
  explicit MLPImpl(GPT2Config cfg);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

  GPT2Config cfg;
  torch::nn::Linear c_fc{nullptr}, c_proj{nullptr};
};
TORCH_MODULE(MLP);

/// A pre-norm transformer block: h = x + attn(ln_1(x)), then h + mlp(ln_2(h)).
///   Block block(cfg); auto y = block(x);  // (B, T, C) -> (B, T, C)
class BlockImpl : public torch::nn::Cloneable<BlockImpl> {
 public:
  explicit BlockImpl(GPT2Config cfg);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)
  /// The block on the input x + delta, with that residual add fused into ln_1 (delta may be
  /// undefined), returning {h, mlp branch}: their sum is the output, left for the next block's ln_1.
  std::pair<torch::Tensor, torch::Tensor> forward_residual(const torch::Tensor& x, const torch::Tensor& delta,
                                                           const LayerCache* cache = nullptr,
                                                           const torch::Tensor& mask = {});
  /// forward_residual's decode step (cache.positions defined, one token a row).
  std::pair<torch::Tensor, torch::Tensor> decode_residual(const torch::Tensor& x, const torch::Tensor& delta,
                                                          const LayerCache& cache);

  GPT2Config cfg;
  torch::nn::LayerNorm ln_1{nullptr}, ln_2{nullptr};
  CausalSelfAttention attn{nullptr};
  MLP mlp{nullptr};
};
TORCH_MODULE(Block);

/// The body of GPT-2 (Hugging Face's GPT2Model): embeddings, blocks and the final layer norm.
///   GPT2Transformer body(cfg); auto h = body(idx);  // (B, T) ids -> (B, T, C)
class GPT2TransformerImpl : public torch::nn::Cloneable<GPT2TransformerImpl> {
 public:
  explicit GPT2TransformerImpl(GPT2Config cfg);
  void reset() override;
  /// With `cache`, its layers' keys and values are stored (and, given positions (B) int64, a decode step
  /// of one token per row at those positions; see LayerCache). `position_ids` (B, T) int64, without a
  /// cache: each token's position within its document in windows of packed documents, which attend
  /// only within themselves (ops::document_mask); undefined: each row is one text at positions 0..T-1.
  torch::Tensor forward(const torch::Tensor& idx, KVCache* cache = nullptr, const torch::Tensor& positions = {},
                        const torch::Tensor& position_ids = {});  // (B, T) int64 -> (B, T, C)
  /// forward before the final norm: {x, delta}, the last block's residual add left pending (delta
  /// undefined when there is no block); forward is ln_f(x + delta).
  std::pair<torch::Tensor, torch::Tensor> forward_residual(const torch::Tensor& idx, KVCache* cache = nullptr,
                                                           const torch::Tensor& positions = {},
                                                           const torch::Tensor& position_ids = {});

  GPT2Config cfg;
  torch::nn::Embedding wte{nullptr}, wpe{nullptr};  // (padded V, C), (block_size, C)
  torch::nn::ModuleList h{nullptr};                 // n_layer Blocks
  torch::nn::LayerNorm ln_f{nullptr};
  ops::IdCheck ids{"GPT2"};  // token ids checked on the device (CUDA)
};
TORCH_MODULE(GPT2Transformer);

/// What GPT2::forward returns: logits (B, T, vocab_size), and the loss when targets were given.
struct GPT2Output {
  torch::Tensor logits;  // (B, T, vocab_size), a view into the padded (B, T, padded V) product
  torch::Tensor loss;    // scalar mean cross-entropy over targets != -100; undefined without targets
};

/// GPT-2 language model with GPT-2's initialisation (drawn as llm.c draws it: after torch::manual_seed(s),
/// llm.c's initial weights for seed s) and a head tied to the token embedding.
///   llmtrain::nn::GPT2 model(llmtrain::nn::GPT2Config::preset("gpt2"));
///   auto out = model(idx, targets);  out.loss.backward();
class GPT2Impl : public torch::nn::Cloneable<GPT2Impl>, public CausalLM {
 public:
  explicit GPT2Impl(GPT2Config cfg);
  void reset() override;
  /// idx and targets (B, T) int64 with T <= block_size; ids in [0, vocab_size), targets also -100
  /// (ignored). Throws llmtrain::Error for shapes, and for ids out of range: at once on the CPU; on a
  /// CUDA device, where ids are checked without stalling the GPU, from check_inputs() or the next
  /// forward (the bad batch's loss is NaN). `position_ids` (B, T) int64: windows of packed documents,
  /// each token's position within its own (see GPT2Transformer::forward); checked on the CPU only.
  GPT2Output forward(const torch::Tensor& idx, const torch::Tensor& targets = {},
                     const torch::Tensor& position_ids = {});
  /// The training loss alone: forward's loss, with the logits' memory reused for their gradient (the
  /// logits are never returned), which saves a (B, T, padded V) buffer. Backward runs once.
  ///   auto loss = model->loss(idx, targets);  loss.backward();
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets,
                     const torch::Tensor& position_ids = {}) override;
  /// Throws llmtrain::Error for an id out of range that an earlier forward on a CUDA device saw,
  /// waiting for those forwards (free right after the host has read their loss); with `wait` false,
  /// only when the device has finished checking every forward queued so far.
  void check_inputs(bool wait = true) override;

  /// Generation's first step: runs prompts idx (B, T), right-padded (row b's prompt is its first
  /// lengths[b] ids, 1 <= lengths[b] <= T), from position 0, stores every layer's keys and values of
  /// positions [0, T) in `cache` (batch B, capacity >= T), and returns the logits (B, vocab_size) after
  /// each row's last prompt token. The padding never reaches them (attention is causal). No gradient.
  ///   auto logits = model->prefill(idx, lengths, cache);
  torch::Tensor prefill(const torch::Tensor& idx, const torch::Tensor& lengths, KVCache& cache);
  /// A step of generation: token idx[b] (B) int64 at position positions[b] (B) int64, which must be
  /// below the cache's capacity and block_size (not checked on CUDA, where it would make the host
  /// wait). Adds each row's key and value there and attends over the row's cached positions before
  /// it. Returns logits (B, vocab_size). No gradient; captures into a CUDA graph.
  ///   auto logits = model->decode(next, positions, cache);
  torch::Tensor decode(const torch::Tensor& idx, const torch::Tensor& positions, KVCache& cache);

  /// Parameters counted as Hugging Face counts them: the embedding at its vocab_size real rows.
  int64_t num_parameters() const override;
  /// Training FLOPs per token at sequence length `seq_len` (forward + backward): 6 per parameter plus
  /// 12 * n_layer * n_embd * seq_len for attention's scores and weighted sums (the count MFU uses).
  double flops_per_token(int64_t seq_len) const override;
  int64_t block_size() const override { return cfg.block_size(); }
  int64_t vocab_size() const override { return cfg.vocab_size(); }
  torch::nn::Module& module() override { return *this; }

  GPT2Config cfg;
  GPT2Transformer transformer{nullptr};

 private:
  torch::Tensor padded_logits(const torch::Tensor& idx, const torch::Tensor& targets,
                              const torch::Tensor& position_ids);  // (B, T, padded V)
};
TORCH_MODULE(GPT2);

}  // namespace llmtrain::nn
