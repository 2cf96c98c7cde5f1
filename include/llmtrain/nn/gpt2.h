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
  Recompute recompute = Recompute::kNone;  // in training forwards

 private:
  std::pair<torch::Tensor, torch::Tensor> train_residual(const torch::Tensor& x, const torch::Tensor& delta,
                                                         const LayerCache* cache, const torch::Tensor& mask);
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
  /// logits are never returned), which saves a (B, T, padded V) buffer; where the head takes no gradient
  /// (frozen, or no grad mode) through ops::linear_cross_entropy, without the whole logits at all.
  /// Backward runs once.
  ///   auto loss = model->loss(idx, targets);  loss.backward();
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets,
                     const torch::Tensor& position_ids = {}) override;
  /// Throws llmtrain::Error for an id out of range that an earlier forward on a CUDA device saw,
  /// waiting for those forwards (free right after the host has read their loss); with `wait` false,
  /// only when the device has finished checking every forward queued so far.
  void check_inputs(bool wait = true) override;

  /// forward's logits without the loss.
  torch::Tensor logits(const torch::Tensor& idx, const torch::Tensor& position_ids = {}) override;

  // CausalLM's generation (see there).
  KVCache make_cache(int64_t batch, int64_t capacity, torch::ScalarType dtype, torch::Device device) const override;
  torch::Tensor prefill(const torch::Tensor& idx, const torch::Tensor& lengths, KVCache& cache) override;
  torch::Tensor decode(const torch::Tensor& idx, const torch::Tensor& positions, KVCache& cache) override;

  ModelSpec spec() const override { return cfg; }
  void set_recompute(Recompute r) override;
  /// Parameters counted as Hugging Face counts them: the embedding at its vocab_size real rows.
  int64_t num_parameters() const override { return cfg.num_parameters(); }
  torch::nn::Module& module() override { return *this; }

  GPT2Config cfg;
  GPT2Transformer transformer{nullptr};

 private:
  torch::Tensor checked_hidden(const torch::Tensor& idx, const torch::Tensor& targets,
                               const torch::Tensor& position_ids);  // the final norm's output (B, T, C)
  torch::Tensor padded_logits(const torch::Tensor& idx, const torch::Tensor& targets,
                              const torch::Tensor& position_ids);  // (B, T, padded V)
};
TORCH_MODULE(GPT2);

}  // namespace llmtrain::nn
