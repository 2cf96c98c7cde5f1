// What training needs of a causal language model, whatever its family: the seam between nn/ and the
// Trainer. A new family (Llama, ...) implements it beside its module; the Trainer's step, evaluation,
// metrics and optimizer see only this and torch::nn::Module. What stays family-specific (building a
// model from its config, its checkpoint and Hugging Face formats, the KV cache of generation) is listed
// in docs/ARCHITECTURE.md.
#pragma once

#include <torch/nn/module.h>
#include <torch/types.h>

#include <cstdint>

namespace llmtrain::nn {

/// A next-token model over ids [0, vocab_size) and sequences up to block_size.
///   nn::CausalLM& lm = *gpt2;  auto loss = lm.loss(idx, targets);  loss.backward();
class CausalLM {
 public:
  virtual ~CausalLM() = default;
  /// The mean cross-entropy of predicting `targets` (B, T) int64 (-100: ignored) from `idx` (B, T),
  /// for backward. `position_ids` (B, T): packed documents, each token's position within its own.
  virtual torch::Tensor loss(const torch::Tensor& idx, const torch::Tensor& targets,
                             const torch::Tensor& position_ids) = 0;
  /// Throws llmtrain::Error for an input id out of range that an earlier forward on a device saw
  /// (devices check without stalling); `wait` false: only once the device has finished them.
  virtual void check_inputs(bool wait) = 0;
  /// Parameters as Hugging Face counts them.
  virtual int64_t num_parameters() const = 0;
  /// Training FLOPs per token at sequence length `seq_len` (forward + backward), MFU's numerator.
  virtual double flops_per_token(int64_t seq_len) const = 0;
  virtual int64_t block_size() const = 0;
  virtual int64_t vocab_size() const = 0;
  /// The module itself: parameters, train()/eval(), to(device), serialization.
  virtual torch::nn::Module& module() = 0;
};

}  // namespace llmtrain::nn
