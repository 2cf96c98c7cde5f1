// The Generator's loop, per call: the prompts right-padded into one (B, T) prefill, its logits sampled,
// then decode steps, each reading the tokens and positions tensors the step before wrote (on the
// device: the host never sits between two steps). A step's tokens are copied to pinned host memory
// behind an event; the host delivers step s - 1's while step s runs, so a row's stop is seen a step
// late and that extra step's token is dropped.
#include "llmtrain/infer/generate.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/utils.h>

#include <algorithm>
#include <optional>

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"

#if LLMTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>

#include "../core/cuda_graph.h"
#endif

namespace llmtrain::infer {

void check(const SamplingOptions& o) {
  LLMTRAIN_CHECK(o.temperature >= 0, "sample: temperature must be >= 0, got ", o.temperature);
  LLMTRAIN_CHECK(o.top_k >= 0, "sample: top_k must be >= 0, got ", o.top_k);
  LLMTRAIN_CHECK(o.top_p > 0 && o.top_p <= 1, "sample: top_p must be in (0, 1], got ", o.top_p);
  LLMTRAIN_CHECK(o.vocab_limit >= 0, "sample: vocab_limit must be >= 0, got ", o.vocab_limit);
}

torch::Tensor sample(const torch::Tensor& all_logits, const SamplingOptions& o, at::Generator& generator) {
  LLMTRAIN_CHECK(all_logits.dim() == 2, "sample: logits must be (B, V), got ", all_logits.sizes());
  check(o);
  // The first vocab_limit columns: ids are their indices all the same.
  const torch::Tensor logits =
      o.vocab_limit > 0 && o.vocab_limit < all_logits.size(-1) ? all_logits.narrow(-1, 0, o.vocab_limit) : all_logits;
  if (o.temperature == 0) return logits.argmax(-1);
  torch::Tensor l = logits.to(torch::kFloat) / o.temperature;  // (B, V)
  if (o.top_k > 0 && o.top_k < l.size(-1)) {
    const auto kth = std::get<0>(l.topk(o.top_k, -1)).select(-1, o.top_k - 1).unsqueeze(-1);
    l = l.masked_fill(l < kth, -INFINITY);
  }
  if (o.top_p < 1) {
    // Keep the smallest set of most likely tokens whose probability reaches top_p (at least one).
    const auto [sorted, order] = l.sort(-1, /*descending=*/true);
    const auto p_sorted = sorted.softmax(-1);
    const auto drop_sorted = (p_sorted.cumsum(-1) - p_sorted) >= o.top_p;  // mass before this token already enough
    l = l.masked_fill(torch::zeros_like(drop_sorted).scatter(-1, order, drop_sorted), -INFINITY);
  }
  const auto probs = l.softmax(-1).to(torch::kDouble);  // (B, V)
  torch::Tensor u = at::rand({logits.size(0)}, generator, torch::TensorOptions().dtype(torch::kDouble));
  if (logits.is_cuda()) u = u.pin_memory().to(logits.device(), /*non_blocking=*/true);
  const auto cum = probs.cumsum(-1);
  // The first token whose cumulative probability exceeds u * total: one with a probability above zero,
  // unless rounding pushes the draw past the end, where the most likely token stands in.
  auto ids = cum.le((u * cum.select(-1, -1)).unsqueeze(-1)).sum(-1).clamp_max(logits.size(-1) - 1);
  const auto kept = probs.gather(-1, ids.unsqueeze(-1)).squeeze(-1).gt(0);
  return torch::where(kept, ids, probs.argmax(-1));
}

struct Generator::Impl {
  std::shared_ptr<nn::CausalLM> model;
  GeneratorOptions options;
  nn::KVCache cache;
  torch::Tensor idx, pos;  // (B) int64: the decode step's tokens and their positions
  torch::Tensor logits;    // (B, V): what the decode step wrote
#if LLMTRAIN_WITH_CUDA
  detail::SideStream side;
  std::unique_ptr<at::cuda::CUDAGraph> graph;
  bool warmed = false;  // one eager step on the side stream went before the capture
#endif

  // A cache of B rows and at least `needed` positions (a power of two, up to block_size), kept when it
  // fits: the graph reads its tensors, so a new cache means a new graph.
  void ensure_cache(int64_t B, int64_t needed, torch::ScalarType dtype, const torch::Device& device) {
    if (cache.batch() == B && cache.capacity() >= needed && cache.k[0].scalar_type() == dtype &&
        cache.k[0].device() == device)
      return;
    int64_t capacity = 64;
    while (capacity < needed) capacity *= 2;
    capacity = std::min(capacity, model->block_size());
    cache = {};  // the old one's memory first
    cache = model->make_cache(B, capacity, dtype, device);
    const auto ids = torch::TensorOptions().dtype(torch::kLong).device(device);
    idx = torch::zeros({B}, ids);
    pos = torch::zeros({B}, ids);
#if LLMTRAIN_WITH_CUDA
    graph.reset();
    warmed = false;
#endif
  }

  torch::Tensor eager_step() {
    auto out = model->decode(idx, pos, cache);
    pos.add_(1);
    return out;
  }

  // logits = the model's next-token logits for idx at pos; pos += 1.
  void decode_step() {
#if LLMTRAIN_WITH_CUDA
    if (idx.is_cuda() && options.cuda_graph) {
      if (graph) {
        graph->replay();
      } else if (!warmed) {  // cuBLAS's workspace and handles are made here, not inside the capture
        logits = side.run([&] { return eager_step(); });
        logits.record_stream(at::cuda::getCurrentCUDAStream());
        warmed = true;
      } else {
        graph = std::make_unique<at::cuda::CUDAGraph>();
        try {
          logits =
              detail::capture_graph(side, *graph, {0, 0}, "Generator: the decode step",
                                    "generate with GeneratorOptions::cuda_graph false", [&] { return eager_step(); });
        } catch (...) {
          graph.reset();
          throw;
        }
        graph->replay();
      }
      return;
    }
#endif
    logits = eager_step();
  }
};

Generator::Generator(std::shared_ptr<nn::CausalLM> model, GeneratorOptions options) : impl_(std::make_unique<Impl>()) {
  LLMTRAIN_CHECK(model, "Generator: no model");
  impl_->model = std::move(model);
  impl_->options = options;
}

Generator::~Generator() = default;

std::vector<std::vector<int32_t>> Generator::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                      int64_t max_new_tokens, const SamplingOptions& options,
                                                      const OnToken& on_token) {
  Impl& d = *impl_;
  nn::CausalLM& model = *d.model;
  check(options);
  LLMTRAIN_CHECK(!prompts.empty(), "generate: no prompts");
  LLMTRAIN_CHECK(max_new_tokens >= 0, "generate: max_new_tokens must be >= 0, got ", max_new_tokens);
  const int64_t B = int64_t(prompts.size()), block = model.block_size();
  int64_t longest = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    LLMTRAIN_CHECK(!prompts[b].empty(), "generate: prompt ", b,
                   " is empty (give at least one token, e.g. end-of-text)");
    longest = std::max<int64_t>(longest, int64_t(prompts[b].size()));
  }
  LLMTRAIN_CHECK(longest + std::max<int64_t>(max_new_tokens, 1) - 1 <= block, "generate: the longest prompt (", longest,
                 " tokens) and ", max_new_tokens, " new ones need ", longest + std::max<int64_t>(max_new_tokens, 1) - 1,
                 " positions; the model has block_size ", block);
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(B));
  if (max_new_tokens == 0) return out;

  torch::nn::Module& module = model.module();
  const bool was_training = module.is_training();
  module.eval();
  struct Restore {
    torch::nn::Module& m;
    bool train;
    ~Restore() {
      if (train) m.train();
    }
  } restore{module, was_training};
  torch::NoGradGuard no_grad;
  const torch::Tensor w = module.parameters().front();  // the model's dtype and device
  const torch::Device device = w.device();
  d.ensure_cache(B, longest + max_new_tokens - 1, w.scalar_type(), device);

  std::vector<int64_t> padded(static_cast<size_t>(B * longest), 0), lengths(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    std::copy(prompts[size_t(b)].begin(), prompts[size_t(b)].end(), padded.begin() + b * longest);
    lengths[size_t(b)] = int64_t(prompts[size_t(b)].size());
  }
  const auto to_device = [&](std::vector<int64_t>& v, std::vector<int64_t> sizes) {
    return torch::from_blob(v.data(), sizes, torch::kLong).to(device);
  };
  const torch::Tensor length = to_device(lengths, {B});
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(options.seed);
  const torch::Tensor first = model.prefill(to_device(padded, {B, longest}), length, d.cache);
  model.check_inputs(/*wait=*/true);  // a prompt id outside the vocabulary (CUDA checks it on the device)

  // Step s's tokens wait in host[s % 2] until ready[s % 2] has passed.
  torch::Tensor host[2];
  for (auto& h : host)
    h = torch::empty({B}, torch::TensorOptions().dtype(torch::kLong).pinned_memory(device.is_cuda()));
#if LLMTRAIN_WITH_CUDA
  std::optional<at::cuda::CUDAEvent> ready[2];
  if (device.is_cuda())
    for (auto& e : ready) e.emplace();
#endif
  const auto queue = [&](int64_t s, const torch::Tensor& next) {
    d.idx.copy_(next);
    host[s % 2].copy_(next, /*non_blocking=*/true);
#if LLMTRAIN_WITH_CUDA
    if (ready[s % 2]) ready[s % 2]->record();
#endif
  };
  std::vector<bool> done(static_cast<size_t>(B), false);
  int64_t open = B;
  const auto deliver = [&](int64_t s) {  // false once every row has ended
#if LLMTRAIN_WITH_CUDA
    if (ready[s % 2]) ready[s % 2]->synchronize();
#endif
    const int64_t* ids = host[s % 2].data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      if (done[size_t(b)]) continue;
      const auto id = int32_t(ids[b]);
      out[size_t(b)].push_back(id);
      if (on_token) on_token(b, id);
      const auto& stops = options.stop_tokens;
      if (std::find(stops.begin(), stops.end(), id) != stops.end() ||
          int64_t(out[size_t(b)].size()) == max_new_tokens) {
        done[size_t(b)] = true;
        --open;
      }
    }
    return open > 0;
  };

  d.pos.copy_(length);
  queue(0, sample(first, options, gen));
  int64_t s = 1;
  for (; s < max_new_tokens; ++s) {
    d.decode_step();
    queue(s, sample(d.logits, options, gen));
    if (!deliver(s - 1)) break;
  }
  if (open > 0) deliver(s - 1);
  return out;
}

std::vector<int32_t> generate(std::shared_ptr<nn::CausalLM> model, const std::vector<int32_t>& prompt,
                              int64_t max_new_tokens, const SamplingOptions& options,
                              const std::function<void(int32_t)>& on_token) {
  Generator g(std::move(model));
  std::vector<int32_t> ids = prompt;
  const auto fresh = g.generate({prompt}, max_new_tokens, options, [&](int64_t, int32_t id) {
    if (on_token) on_token(id);
  });
  ids.insert(ids.end(), fresh[0].begin(), fresh[0].end());
  return ids;
}

}  // namespace llmtrain::infer
