#include "llmtrain/nn/causal_lm.h"

#include "llmtrain/core/error.h"
#include "llmtrain/nn/gpt2.h"
#include "llmtrain/nn/llama.h"

namespace llmtrain::nn {

KVCache::KVCache(int64_t layers, int64_t batch, int64_t heads, int64_t capacity, int64_t head_dim,
                 torch::ScalarType dtype, torch::Device device) {
  LLMTRAIN_CHECK(batch >= 1, "KVCache: batch must be positive, got ", batch);
  const auto options = torch::TensorOptions().dtype(dtype).device(device);
  for (int64_t i = 0; i < layers; ++i) {
    k.push_back(torch::zeros({batch, heads, capacity, head_dim}, options));
    v.push_back(torch::zeros_like(k.back()));
  }
}

std::shared_ptr<CausalLM> make_model(const ModelSpec& spec) {
  if (spec.is_gpt2()) return GPT2(spec.gpt2()).ptr();
  return Llama(spec.llama()).ptr();
}

}  // namespace llmtrain::nn
