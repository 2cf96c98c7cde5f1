#include "llmtrain/infer/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/utils.h>

#include "llmtrain/core/error.h"

namespace llmtrain::infer {

torch::Tensor sample(const torch::Tensor& logits, const SamplingOptions& o, at::Generator& generator) {
  LLMTRAIN_CHECK(logits.dim() == 2, "sample: logits must be (B, V), got ", logits.sizes());
  LLMTRAIN_CHECK(o.temperature >= 0, "sample: temperature must be >= 0, got ", o.temperature);
  LLMTRAIN_CHECK(o.top_k >= 0, "sample: top_k must be >= 0, got ", o.top_k);
  LLMTRAIN_CHECK(o.top_p > 0 && o.top_p <= 1, "sample: top_p must be in (0, 1], got ", o.top_p);
  if (o.temperature == 0) return logits.argmax(-1);
  torch::Tensor l = logits.to(torch::kFloat) / o.temperature;  // (B, V)
  if (o.top_k > 0 && o.top_k < l.size(-1)) {
    const auto kth = std::get<0>(l.topk(o.top_k, -1)).select(-1, o.top_k - 1).unsqueeze(-1);
    l = l.masked_fill(l < kth, -INFINITY);
  }
  if (o.top_p < 1) {
    // Keep the smallest set of most likely tokens whose probability reaches top_p (at least one).
    const auto [sorted, order] = l.sort(-1, /*descending=*/true);
    const auto cum = sorted.softmax(-1).cumsum(-1);
    const auto drop_sorted = (cum - sorted.softmax(-1)) >= o.top_p;  // mass before this token already enough
    l = l.masked_fill(torch::zeros_like(drop_sorted).scatter(-1, order, drop_sorted), -INFINITY);
  }
  const auto probs = l.softmax(-1);
  return at::multinomial(probs.cpu(), 1, false, generator).squeeze(-1).to(logits.device());
}

std::vector<int32_t> generate(nn::GPT2& model, const std::vector<int32_t>& prompt, int64_t max_new_tokens,
                              const SamplingOptions& options, const std::function<void(int32_t)>& on_token) {
  LLMTRAIN_CHECK(!prompt.empty(), "generate: the prompt is empty (give at least one token, e.g. end-of-text)");
  LLMTRAIN_CHECK(max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  const bool was_training = model->is_training();
  model->eval();
  torch::NoGradGuard no_grad;
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  const auto device = model->parameters().front().device();
  std::vector<int32_t> ids = prompt;
  const int64_t block = model->cfg.block_size();
  for (int64_t i = 0; i < max_new_tokens; ++i) {
    const int64_t start = std::max<int64_t>(0, int64_t(ids.size()) - block);
    const auto ctx = torch::tensor(std::vector<int64_t>(ids.begin() + start, ids.end()), torch::kLong).unsqueeze(0).to(device);
    const auto logits = model(ctx).logits.select(1, ctx.size(1) - 1);  // (1, V)
    const int32_t next = int32_t(sample(logits, options, gen).item<int64_t>());
    model->check_inputs();  // a prompt id outside the vocabulary (CUDA checks it on the device)
    ids.push_back(next);
    if (on_token) on_token(next);
    if (options.stop_token && next == *options.stop_token) break;
  }
  if (was_training) model->train();
  return ids;
}

}  // namespace llmtrain::infer
