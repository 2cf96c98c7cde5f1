// What the rest of llmtrain needs of a causal language model, whatever its family: the seam between nn/
// and the Trainer, the Generator, io/ and the binaries. GPT-2 and the Llama family implement it beside
// their modules; make_model builds either from a ModelSpec.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "llmtrain/nn/model_spec.h"
#include "llmtrain/nn/recompute.h"

namespace llmtrain::nn {

/// Keys and values a model keeps between calls when it generates token by token: per layer,
/// (B, key/value heads, capacity, head_dim) in the model's dtype. prefill writes the prompts'
/// positions, decode one more position per row at each step; infer::Generator owns one.
///   auto cache = model->make_cache(4, 1024, torch::kBFloat16, torch::kCUDA);
struct KVCache {
  KVCache() = default;
  /// Zeroed tensors for `layers` layers of `heads` heads of `head_dim`.
  KVCache(int64_t layers, int64_t batch, int64_t heads, int64_t capacity, int64_t head_dim, torch::ScalarType dtype,
          torch::Device device);
  int64_t batch() const { return k.empty() ? 0 : k[0].size(0); }
  int64_t capacity() const { return k.empty() ? 0 : k[0].size(2); }

  std::vector<torch::Tensor> k, v;  // one per layer each
};

/// One layer's view of a KVCache for a forward: a prefill (positions undefined) stores the keys and
/// values of positions [0, T); a decode step (positions (B) int64, T = 1) stores row b's at
/// positions[b] and attends over the row's positions before it.
struct LayerCache {
  torch::Tensor k, v;       // (B, heads, capacity, D)
  torch::Tensor positions;  // (B) int64, or undefined
};

/// A next-token model over ids [0, vocab_size) and sequences up to block_size.
///   std::shared_ptr<nn::CausalLM> lm = nn::make_model(spec);  auto loss = lm->loss(idx, targets);
class CausalLM {
 public:
  virtual ~CausalLM() = default;
  /// The mean cross-entropy of predicting `targets` (B, T) int64 (-100: ignored) from `idx` (B, T),
  /// for backward. `position_ids` (B, T): packed documents, each token's position within its own.
  virtual torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets,
                             const torch::Tensor& position_ids) = 0;
  /// Next-token logits (B, T, vocab_size) for `idx` (B, T) int64.
  virtual torch::Tensor logits(const torch::Tensor& idx, const torch::Tensor& position_ids = {}) = 0;
  /// Throws llmtrain::Error for an input id out of range that an earlier forward on a device saw
  /// (devices check without stalling); `wait` false: only once the device has finished them.
  virtual void check_inputs(bool wait) = 0;

  /// Generation's cache for `batch` rows and `capacity` positions (at most block_size).
  virtual KVCache make_cache(int64_t batch, int64_t capacity, torch::ScalarType dtype, torch::Device device) const = 0;
  /// Generation's first step: runs prompts idx (B, T), right-padded (row b's prompt is its first
  /// lengths[b] ids, 1 <= lengths[b] <= T), from position 0, stores every layer's keys and values of
  /// positions [0, T) in `cache` (batch B, capacity >= T), and returns the logits (B, vocab_size) after
  /// each row's last prompt token. The padding never reaches them (attention is causal). No gradient.
  virtual torch::Tensor prefill(const torch::Tensor& idx, const torch::Tensor& lengths, KVCache& cache) = 0;
  /// A step of generation: token idx[b] (B) int64 at position positions[b] (B) int64, which must be
  /// below the cache's capacity (not checked on CUDA, where it would make the host wait). Adds each
  /// row's key and value there and attends over the row's cached positions before it. Returns logits
  /// (B, vocab_size). No gradient; captures into a CUDA graph.
  virtual torch::Tensor decode(const torch::Tensor& idx, const torch::Tensor& positions, KVCache& cache) = 0;

  /// The family and shape: what builds this model again (make_model) and what its files record.
  virtual ModelSpec spec() const = 0;
  /// What training forwards keep for backward from now on (nn/recompute.h; kNone at construction).
  /// Throws llmtrain::Error for a model with dropout, whose recomputed draws would differ.
  virtual void set_recompute(Recompute r) = 0;
  /// Parameters as Hugging Face counts them.
  virtual int64_t num_parameters() const = 0;
  /// Training FLOPs per token at sequence length `seq_len` (forward + backward), MFU's numerator.
  double flops_per_token(int64_t seq_len) const { return spec().flops_per_token(seq_len); }
  int64_t block_size() const { return spec().block_size(); }
  int64_t vocab_size() const { return spec().vocab_size(); }
  /// The module itself: parameters, train()/eval(), to(device), serialization.
  virtual torch::nn::Module& module() = 0;
  const torch::nn::Module& module() const { return const_cast<CausalLM*>(this)->module(); }
};

/// A model of `spec`'s family and shape, randomly initialised as that family is (after
/// torch::manual_seed), on the CPU in float32.
///   auto model = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset("llama-tiny"));
std::shared_ptr<CausalLM> make_model(const ModelSpec& spec);

}  // namespace llmtrain::nn
