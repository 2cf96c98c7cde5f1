// Generation from any CausalLM (GPT-2, the Llama family): a sampler (greedy, temperature, top-k, top-p, stop tokens, a
// seed) and a Generator that runs a batch of prompts of different lengths against a preallocated KV cache: one prefill
// of the prompts, then one decode step per new token, which on a GPU is replayed as a CUDA graph (a whole step in one
// launch: at batch 1 the host, not the GPU, would otherwise set the pace). The host reads each step's tokens while the
// GPU already runs the next one.
#pragma once

#include <torch/nn/pimpl.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <type_traits>
#include <vector>

#include "llmtrain/nn/causal_lm.h"

namespace llmtrain::infer {

/// How the next token is picked. temperature 0 is greedy (argmax); top_k 0 and top_p 1 filter nothing.
struct SamplingOptions {
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 1337;
  std::vector<int32_t> stop_tokens;  // a row ends after producing one of these
  /// Ids at or past it are never picked: a model's vocabulary padded past its tokenizer's (GPT-2's
  /// 50304 for 50257 ids) has rows no text stands for. 0: every id.
  int64_t vocab_limit = 0;
};

/// Throws llmtrain::Error naming the first option out of range.
void check(const SamplingOptions& options);

/// One token id per row of `logits` (B, V), on the logits' device. The random numbers, one per row,
/// come from `generator` (a CPU generator) whatever the device, so a seed draws the same numbers on the
/// CPU and the GPU; a row's token is where its uniform number falls in the cumulative distribution.
///   auto next = llmtrain::infer::sample(logits, opts, gen);  // (B) int64
torch::Tensor sample(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator);

/// How a Generator runs its decode steps.
struct GeneratorOptions {
  /// On a CUDA device, replay the decode step as a CUDA graph (captured at a batch size's second step).
  bool cuda_graph = true;
};

/// Generates from a model with a KV cache, in the model's dtype and on its device (cast the model to
/// bf16 for fast generation on a GPU). The cache and the graph are kept for the next call of the same
/// batch size, dtype and device; the graph reads the parameters where they lay when it was captured,
/// so after giving the model new parameter storage on the same device and dtype (assigning tensors
/// rather than copying into them), make a new Generator.
///   llmtrain::infer::Generator gen(model);
///   auto out = gen.generate({{464, 1578}, {50256}}, 64, greedy);  // the new ids of each row
class Generator {
 public:
  explicit Generator(std::shared_ptr<nn::CausalLM> model, GeneratorOptions options = {});
  /// From a module holder of either family: Generator gen(gpt2), Generator gen(llama).
  template <typename Impl, typename = std::enable_if_t<std::is_base_of_v<nn::CausalLM, Impl>>>
  explicit Generator(const torch::nn::ModuleHolder<Impl>& model, GeneratorOptions options = {})
      : Generator(std::static_pointer_cast<nn::CausalLM>(model.ptr()), options) {}
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  /// Called with each new id of each row as soon as the host has it (in order within a row).
  using OnToken = std::function<void(int64_t row, int32_t id)>;
  /// Continues each prompt (non-empty; ids in the vocabulary) by up to max_new_tokens ids, fewer for a
  /// row that produces one of options.stop_tokens (which is kept). The longest prompt plus
  /// max_new_tokens must fit in the model's block_size + 1 positions (the last token is never fed
  /// back). Returns the new ids of each row. Throws llmtrain::Error for bad prompts or options.
  std::vector<std::vector<int32_t>> generate(const std::vector<std::vector<int32_t>>& prompts, int64_t max_new_tokens,
                                             const SamplingOptions& options, const OnToken& on_token = nullptr);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// One prompt through a Generator of its own: the prompt followed by up to `max_new_tokens` ids;
/// `on_token` (optional) sees each new one as it comes.
///   auto ids = llmtrain::infer::generate(model, {464, 1578}, 32, options);
std::vector<int32_t> generate(std::shared_ptr<nn::CausalLM> model, const std::vector<int32_t>& prompt,
                              int64_t max_new_tokens, const SamplingOptions& options,
                              const std::function<void(int32_t)>& on_token = nullptr);
template <typename Impl, typename = std::enable_if_t<std::is_base_of_v<nn::CausalLM, Impl>>>
std::vector<int32_t> generate(const torch::nn::ModuleHolder<Impl>& model, const std::vector<int32_t>& prompt,
                              int64_t max_new_tokens, const SamplingOptions& options,
                              const std::function<void(int32_t)>& on_token = nullptr) {
  return generate(std::static_pointer_cast<nn::CausalLM>(model.ptr()), prompt, max_new_tokens, options, on_token);
}

}  // namespace llmtrain::infer
