// Sampling from GPT-2: temperature, top-k and top-p (nucleus) filtering with a seeded generator, and
// a generation loop that feeds the model its last block_size tokens each step. (No KV cache yet: each
// new token costs a forward pass over the context.)
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "llmtrain/nn/gpt2.h"

namespace llmtrain::infer {

/// How the next token is picked. temperature 0 is greedy (argmax); top_k 0 and top_p 1 filter nothing.
struct SamplingOptions {
  double temperature = 1.0;
  int64_t top_k = 0;
  double top_p = 1.0;
  uint64_t seed = 1337;
  std::optional<int32_t> stop_token;  // generation ends after producing it
};

/// One token id per row of `logits` (B, V). Throws llmtrain::Error for options out of range.
///   auto next = llmtrain::infer::sample(logits, opts, gen);  // (B) int64
torch::Tensor sample(const torch::Tensor& logits, const SamplingOptions& options, at::Generator& generator);

/// Appends up to `max_new_tokens` sampled ids to `prompt`; `on_token` (optional) sees each as it comes.
///   auto ids = llmtrain::infer::generate(model, {464, 1578}, 32, {.temperature = 0});
std::vector<int32_t> generate(nn::GPT2& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                              const SamplingOptions& options,
                              const std::function<void(int32_t)>& on_token = nullptr);

}  // namespace llmtrain::infer
