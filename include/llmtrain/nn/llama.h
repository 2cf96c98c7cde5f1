// The Llama family as one LibTorch module: Hugging Face's LlamaForCausalLM, MistralForCausalLM and
// Qwen2ForCausalLM, with their parameter names (model.layers.N.self_attn.q_proj.weight, ...), so that
// their folders map across by name. RMSNorm before attention and before the MLP, rotary position
// embeddings on queries and keys (rotate-half layout, frequencies in float32 as transformers computes
// them, with linear or llama3 scaling), grouped-query attention, a SwiGLU MLP, and a head tied to the
// token embedding or separate.
#pragma once

#include <torch/nn/cloneable.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>

#include "llmtrain/nn/causal_lm.h"
#include "llmtrain/nn/llama_config.h"
#include "llmtrain/ops/embedding.h"

namespace llmtrain::nn {

/// x / sqrt(mean(x^2) + eps) * weight, normalised in float32 whatever the input's dtype (ops::rms_norm).
///   RMSNorm norm(4096, 1e-5); auto y = norm(x);  // (..., C) -> (..., C)
class RMSNormImpl : public torch::nn::Cloneable<RMSNormImpl> {
 public:
  RMSNormImpl(int64_t size, double eps);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);

  int64_t size;
  double eps;
  torch::Tensor weight;
};
TORCH_MODULE(RMSNorm);

/// The rotary frequencies of head_dim / 2 channel pairs, (D / 2) float32 on `device`, as transformers
/// derives them from rope_theta and the rope scaling (ops::rotary_tables turns them into angles).
torch::Tensor rope_frequencies(const LlamaConfig& cfg, const torch::Device& device);

/// Attention with rotary positions and grouped-query heads: q_proj (C -> H D), k_proj and v_proj
/// (C -> KV D), attention (causal; or `mask`, (B or 1, 1, T, T) bool, true where a query may see a key),
/// o_proj (H D -> C).
class LlamaAttentionImpl : public torch::nn::Cloneable<LlamaAttentionImpl> {
 public:
  explicit LlamaAttentionImpl(LlamaConfig cfg);
  void reset() override;
  /// cos and sin: ops::rotary_tables of the tokens' positions, (B or 1, T, D / 2). `cache`: a
  /// prefill's, where the rotated keys and the values of positions [0, T) are stored.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask = {},
                        const LayerCache* cache = nullptr);  // (B, T, C) -> (B, T, C)

  LlamaConfig cfg;
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
};
TORCH_MODULE(LlamaAttention);

/// SwiGLU: down_proj(silu(gate_proj(x)) * up_proj(x)).
class LlamaMLPImpl : public torch::nn::Cloneable<LlamaMLPImpl> {
 public:
  explicit LlamaMLPImpl(LlamaConfig cfg);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x);  // (B, T, C) -> (B, T, C)

  LlamaConfig cfg;
  torch::nn::Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};
};
TORCH_MODULE(LlamaMLP);

/// h = x + attn(input_layernorm(x)), then h + mlp(post_attention_layernorm(h)).
class LlamaDecoderLayerImpl : public torch::nn::Cloneable<LlamaDecoderLayerImpl> {
 public:
  explicit LlamaDecoderLayerImpl(LlamaConfig cfg);
  void reset() override;
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask = {}, const LayerCache* cache = nullptr);
  /// A decode step, the residual stream kept as {x, delta} (their sum is the layer's input; delta
  /// undefined: x alone) so that each add and norm folds into the product after it
  /// (ops::rms_norm_linear): five launches a layer on CUDA at small batches. The row's new key
  /// (rotated by inv_freq at cache.positions) and value are stored there and attention runs over the
  /// row's cached positions (within the sliding window). Returns the layer's output as {h, delta}.
  std::pair<torch::Tensor, torch::Tensor> decode(const torch::Tensor& x, const torch::Tensor& delta,
                                                 const torch::Tensor& inv_freq, const LayerCache& cache);

  LlamaConfig cfg;
  LlamaAttention self_attn{nullptr};
  LlamaMLP mlp{nullptr};
  RMSNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  Recompute recompute = Recompute::kNone;  // in training forwards

 private:
  torch::Tensor train_forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                              const torch::Tensor& mask, const LayerCache* cache);
};
TORCH_MODULE(LlamaDecoderLayer);

/// The body (Hugging Face's LlamaModel): embed_tokens, the layers, the final norm.
class LlamaModelImpl : public torch::nn::Cloneable<LlamaModelImpl> {
 public:
  explicit LlamaModelImpl(LlamaConfig cfg);
  void reset() override;
  /// `position_ids` (B, T) int64: each token's position within its document in windows of packed
  /// documents, which attend only within themselves; undefined: each row is one text at 0..T-1.
  /// `cache`: a prefill's (from position 0), whose layers store their keys and values.
  torch::Tensor forward(const torch::Tensor& idx, const torch::Tensor& position_ids = {},
                        KVCache* cache = nullptr);  // -> (B, T, C)
  /// A decode step, ids (B) at positions (B), up to the final norm: the residual stream as {x, delta},
  /// each (B, 1, C), whose sum is the last layer's output (the norm folds into the head's product).
  std::pair<torch::Tensor, torch::Tensor> decode_residual(const torch::Tensor& idx, const torch::Tensor& positions,
                                                          KVCache& cache);

  LlamaConfig cfg;
  torch::nn::Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RMSNorm norm{nullptr};
  ops::IdCheck ids{"Llama"};

 private:
  torch::Tensor inv_freq;  // rope_frequencies on the device last used (not a parameter or buffer)
  const torch::Tensor& frequencies(const torch::Device& device);
};
TORCH_MODULE(LlamaModel);

/// What Llama::forward returns: logits (B, T, vocab_size), and the loss when targets were given.
struct LlamaOutput {
  torch::Tensor logits, loss;
};

/// A Llama-family language model, randomly initialised as transformers does (normal(0,
/// initializer_range) weights, zero biases, unit norms) or loaded from a folder (io/hf_llama.h).
///   llmtrain::nn::Llama model(llmtrain::nn::LlamaConfig::preset("llama-tiny"));
///   auto out = model(idx, targets);  out.loss.backward();
class LlamaImpl : public torch::nn::Cloneable<LlamaImpl>, public CausalLM {
 public:
  explicit LlamaImpl(LlamaConfig cfg);
  void reset() override;
  /// idx and targets (B, T) int64, T <= block_size; ids in [0, vocab_size), targets also -100 (ignored).
  /// Throws llmtrain::Error for shapes and for ids out of range (at once on the CPU; on CUDA from
  /// check_inputs() or the next forward).
  LlamaOutput forward(const torch::Tensor& idx, const torch::Tensor& targets = {},
                      const torch::Tensor& position_ids = {});

  // CausalLM (see there)
  torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets,
                     const torch::Tensor& position_ids = {}) override;
  torch::Tensor logits(const torch::Tensor& idx, const torch::Tensor& position_ids = {}) override;
  void check_inputs(bool wait) override;
  KVCache make_cache(int64_t batch, int64_t capacity, torch::ScalarType dtype, torch::Device device) const override;
  torch::Tensor prefill(const torch::Tensor& idx, const torch::Tensor& lengths, KVCache& cache) override;
  torch::Tensor decode(const torch::Tensor& idx, const torch::Tensor& positions, KVCache& cache) override;
  ModelSpec spec() const override { return cfg; }
  void set_recompute(Recompute r) override;
  int64_t num_parameters() const override { return cfg.num_parameters(); }
  torch::nn::Module& module() override { return *this; }

  LlamaConfig cfg;
  LlamaModel model{nullptr};
  torch::nn::Linear lm_head{nullptr};  // null when the head is tied to model.embed_tokens

 private:
  torch::Tensor checked_hidden(const torch::Tensor& idx, const torch::Tensor& targets,
                               const torch::Tensor& position_ids);  // the final norm's output (B, T, C)
  torch::Tensor checked_logits(const torch::Tensor& idx, const torch::Tensor& targets,
                               const torch::Tensor& position_ids);
  torch::Tensor head(const torch::Tensor& h);  // hidden states -> logits
  const torch::Tensor& head_weight() const;    // lm_head's, or the tied embedding's
};
TORCH_MODULE(Llama);

}  // namespace llmtrain::nn
