#include <ATen/CPUGeneratorImpl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "llmtrain/infer/generate.h"
#include "llmtrain/nn/gpt2.h"
#include "test_util.h"

using llmtrain::infer::SamplingOptions;
using llmtrain::testing::expect_error;

namespace {
at::Generator seeded(uint64_t seed) { return at::make_generator<at::CPUGeneratorImpl>(seed); }
const auto kProbs = torch::tensor({{0.5, 0.3, 0.15, 0.05}}, torch::kDouble);
}  // namespace

TEST(Sample, GreedyTopKAndTopPKeepWhatTheyShould) {
  auto gen = seeded(0);
  const auto logits = kProbs.log().to(torch::kFloat).repeat({2000, 1});  // (2000, 4)
  SamplingOptions o;
  o.temperature = 0;
  EXPECT_TRUE(llmtrain::infer::sample(logits, o, gen).eq(0).all().item<bool>());
  const auto seen = [&](SamplingOptions opts) {
    const auto ids = llmtrain::infer::sample(logits, opts, gen);
    std::set<int64_t> s;
    for (int64_t i = 0; i < ids.size(0); ++i) s.insert(ids[i].item<int64_t>());
    return s;
  };
  SamplingOptions k;
  k.top_k = 2;
  EXPECT_EQ(seen(k), (std::set<int64_t>{0, 1}));
  SamplingOptions p;
  p.top_p = 0.7;  // 0.5 + 0.3 reach it: tokens 0 and 1
  EXPECT_EQ(seen(p), (std::set<int64_t>{0, 1}));
  p.top_p = 0.5;
  EXPECT_EQ(seen(p), (std::set<int64_t>{0}));
  EXPECT_EQ(seen(SamplingOptions()), (std::set<int64_t>{0, 1, 2, 3}));
  // Padded vocabulary: ids past the limit are never picked, greedy or sampled.
  SamplingOptions limited;
  limited.vocab_limit = 2;
  EXPECT_EQ(seen(limited), (std::set<int64_t>{0, 1}));
  limited.temperature = 0;
  const auto padded = torch::tensor({0.f, 1.f, 5.f}).repeat({3, 1});  // the padding column most likely
  EXPECT_TRUE(llmtrain::infer::sample(padded, limited, gen).eq(1).all().item<bool>());
  limited.vocab_limit = -1;
  llmtrain::testing::expect_error([&] { llmtrain::infer::sample(padded, limited, gen); }, {"vocab_limit", "-1"});
}

TEST(Sample, FrequenciesFollowTheDistributionAndSeedsRepeat) {
  const auto logits = kProbs.log().to(torch::kFloat).repeat({20000, 1});
  auto a = seeded(5), b = seeded(5);
  const auto x = llmtrain::infer::sample(logits, {}, a), y = llmtrain::infer::sample(logits, {}, b);
  EXPECT_TRUE(torch::equal(x, y));
  const auto freq = torch::bincount(x, {}, 4).to(torch::kDouble) / 20000.0;
  EXPECT_LT((freq - kProbs[0]).abs().max().item<double>(), 0.02);
  SamplingOptions hot;
  hot.temperature = 100;  // nearly uniform
  const auto flat = torch::bincount(llmtrain::infer::sample(logits, hot, a), {}, 4).to(torch::kDouble) / 20000.0;
  EXPECT_LT((flat - 0.25).abs().max().item<double>(), 0.03);
}

TEST(Generate, GreedyEqualsTheArgmaxLoopAndStops) {
  torch::manual_seed(0);
  llmtrain::nn::GPT2 model(llmtrain::nn::GPT2Config::preset("tiny"));
  SamplingOptions o;
  o.temperature = 0;
  const std::vector<int32_t> prompt = {464, 1578, 286};
  const auto ids = llmtrain::infer::generate(model, prompt, 12, o);
  ASSERT_EQ(ids.size(), 15u);
  std::vector<int64_t> ctx(prompt.begin(), prompt.end());
  torch::NoGradGuard no_grad;
  for (int i = 0; i < 12; ++i) {
    const auto logits = model(torch::tensor(ctx, torch::kLong).unsqueeze(0)).logits;
    ctx.push_back(logits[0][-1].argmax().item<int64_t>());
    EXPECT_EQ(ids[3 + size_t(i)], ctx.back()) << i;
  }
  o.stop_tokens = {ids[3]};
  EXPECT_EQ(llmtrain::infer::generate(model, prompt, 12, o).size(), 4u);  // stops after producing it
  auto gen = seeded(0);
  SamplingOptions bad;
  bad.top_p = 0;
  expect_error([&] { llmtrain::infer::sample(torch::zeros({1, 4}), bad, gen); }, {"top_p must be in (0, 1]"});
  expect_error([&] { llmtrain::infer::generate(model, {}, 3, o); }, {"prompt 0 is empty"});
}

namespace {

llmtrain::nn::GPT2 tiny_model(uint64_t seed) {
  torch::manual_seed(seed);
  llmtrain::nn::GPT2 model(llmtrain::nn::GPT2Config::preset("tiny").vocab_size(300).block_size(48));
  model->eval();
  return model;
}

SamplingOptions greedy() {
  SamplingOptions o;
  o.temperature = 0;
  return o;
}

}  // namespace

TEST(KVCache, PrefillAndDecodeStepsEqualTheWholeForward) {
  // Every family: GPT-2, and Llama, Mistral (a window of 8, passed by the last steps) and Qwen2 with
  // grouped-query heads.
  for (const char* preset : {"tiny", "llama-tiny", "mistral-tiny", "qwen2-tiny"}) {
    SCOPED_TRACE(preset);
    torch::manual_seed(1);
    const auto model = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset(preset));
    model->module().eval();
    torch::NoGradGuard no_grad;
    // Three rows of different prompt lengths, right-padded; then five steps of given tokens.
    const std::vector<int64_t> lengths = {5, 9, 1};
    const auto seqs = torch::randint(250, {3, 9 + 5}, torch::kLong);
    auto prompts = seqs.narrow(1, 0, 9).clone();
    prompts[0].narrow(0, 5, 4).fill_(7);  // the padding must not matter
    prompts[2].narrow(0, 1, 8).fill_(7);
    auto cache = model->make_cache(3, 20, torch::kFloat, torch::kCPU);
    const auto len = torch::tensor(lengths, torch::kLong);
    std::vector<torch::Tensor> got = {model->prefill(prompts, len, cache)};  // (3, V) after each prompt
    auto pos = len.clone();
    for (int64_t s = 0; s < 5; ++s) {
      const auto next = seqs.gather(1, pos.unsqueeze(1)).squeeze(1);  // row b's token at position pos[b]
      got.push_back(model->decode(next, pos, cache));
      pos += 1;
    }
    for (int64_t b = 0; b < 3; ++b) {
      const int64_t L = lengths[size_t(b)];
      const auto whole = model->logits(seqs[b].narrow(0, 0, L + 5).unsqueeze(0))[0];  // (L + 5, V)
      for (int64_t s = 0; s <= 5; ++s)
        EXPECT_LT(llmtrain::testing::max_abs_diff(got[size_t(s)][b], whole[L - 1 + s]), 1e-5)
            << "row " << b << " step " << s;
    }
    expect_error([&] { model->decode(torch::zeros({2}, torch::kLong), torch::zeros({2}, torch::kLong), cache); },
                 {"the cache holds 3 rows, the batch has 2"});
    expect_error(
        [&] {
          model->prefill(prompts, torch::tensor({5, 10, 1}), cache);
        },
        {"every length must lie in [1, 9]"});
    expect_error(
        [&] {
          model->decode(seqs.select(1, 0), torch::tensor({3, 20, 4}), cache);
        },
        {"positions must lie in [0, 20)"});
    expect_error([&] { model->make_cache(1, model->block_size() + 1, torch::kFloat, torch::kCPU); },
                 {"capacity", "is outside [1, block_size"});
  }
}

TEST(Generator, BatchOfPromptsEqualsEachPromptAlone) {
  auto model = tiny_model(2);
  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 250}, {9}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}};
  llmtrain::infer::Generator gen(model);
  std::vector<std::vector<int32_t>> seen(3);
  const auto batch =
      gen.generate(prompts, 20, greedy(), [&](int64_t row, int32_t id) { seen[size_t(row)].push_back(id); });
  ASSERT_EQ(batch.size(), 3u);
  EXPECT_EQ(seen, batch);  // on_token saw every id, in order
  for (size_t b = 0; b < 3; ++b) {
    EXPECT_EQ(batch[b].size(), 20u);
    auto alone = llmtrain::infer::generate(model, prompts[b], 20, greedy());
    alone.erase(alone.begin(), alone.begin() + int64_t(prompts[b].size()));
    EXPECT_EQ(batch[b], alone) << "row " << b;
  }
  // The cache kept from the first call (batch 3) serves a call with other lengths.
  EXPECT_EQ(gen.generate(prompts, 20, greedy()), batch);
  const std::vector<std::vector<int32_t>> shorter = {{9}, {5, 17, 250}, {1, 2}};
  const auto again = gen.generate(shorter, 7, greedy());
  llmtrain::infer::Generator fresh(model);
  EXPECT_EQ(again, fresh.generate(shorter, 7, greedy()));
}

TEST(Generator, StopTokensEndEachRowOnItsOwnAndSeedsRepeat) {
  auto model = tiny_model(3);
  const std::vector<std::vector<int32_t>> prompts = {{5, 17}, {100, 101, 102}};
  llmtrain::infer::Generator gen(model);
  const auto free = gen.generate(prompts, 12, greedy());
  auto o = greedy();
  o.stop_tokens = {free[0][3], 299};                       // row 0 makes the first as its 4th token (or before)
  const auto cut = [&](const std::vector<int32_t>& row) {  // up to and with the first stop token
    const auto at = std::find_first_of(row.begin(), row.end(), o.stop_tokens.begin(), o.stop_tokens.end());
    return std::vector<int32_t>(row.begin(), at == row.end() ? at : at + 1);
  };
  const auto stopped = gen.generate(prompts, 12, o);
  EXPECT_LE(stopped[0].size(), 4u);
  EXPECT_EQ(stopped[0], cut(free[0]));
  EXPECT_EQ(stopped[1], cut(free[1]));
  // Sampling: a seed gives the same tokens again, another seed others.
  SamplingOptions warm;
  warm.temperature = 1.5;
  warm.top_k = 50;
  warm.top_p = 0.95;
  const auto a = gen.generate(prompts, 16, warm), b = gen.generate(prompts, 16, warm);
  EXPECT_EQ(a, b);
  warm.seed = 7;
  EXPECT_NE(gen.generate(prompts, 16, warm), a);
}

TEST(Generator, BadPromptsAndLengthsAreNamed) {
  auto model = tiny_model(4);
  llmtrain::infer::Generator gen(model);
  expect_error([&] { gen.generate({{1, 2}, {}}, 3, greedy()); }, {"prompt 1 is empty"});
  expect_error([&] { gen.generate({}, 3, greedy()); }, {"no prompts"});
  expect_error([&] { gen.generate({std::vector<int32_t>(40, 1)}, 10, greedy()); },
               {"longest prompt (40 tokens) and 10 new ones need 49 positions", "block_size 48"});
  EXPECT_EQ(gen.generate({std::vector<int32_t>(40, 1)}, 9, greedy())[0].size(), 9u);  // exactly fits
  expect_error([&] { gen.generate({{1, 300}}, 3, greedy()); }, {"idx holds token id 300", "[0, 300)"});
  SamplingOptions bad;
  bad.temperature = -1;
  expect_error([&] { gen.generate({{1}}, 3, bad); }, {"temperature must be >= 0"});
  EXPECT_EQ(gen.generate({{1}, {2}}, 0, greedy()), (std::vector<std::vector<int32_t>>{{}, {}}));
}

TEST(Generator, CudaGraphStepsEqualEagerStepsAndTheCpu_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  auto model = tiny_model(5);
  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 250}, {9}, {1, 2, 3, 4, 5, 6, 7, 8}};
  const auto on_cpu = llmtrain::infer::Generator(model).generate(prompts, 30, greedy());
  model->to(torch::kCUDA);
  llmtrain::infer::GeneratorOptions eager;
  eager.cuda_graph = false;
  llmtrain::infer::Generator graphed(model), stepwise(model, eager);
  EXPECT_EQ(graphed.generate(prompts, 30, greedy()), on_cpu);  // float32: the same argmax as the CPU
  EXPECT_EQ(graphed.generate(prompts, 30, greedy()), on_cpu);  // the captured graph, replayed again
  EXPECT_EQ(stepwise.generate(prompts, 30, greedy()), on_cpu);
  // bf16: the graph replays exactly the eager kernels, so the tokens are the same, sampled ones too.
  model->to(torch::kBFloat16);
  SamplingOptions warm;
  warm.top_k = 40;
  for (const auto& o : {greedy(), warm})
    EXPECT_EQ(graphed.generate(prompts, 30, o), stepwise.generate(prompts, 30, o)) << "temperature " << o.temperature;
}

// The Llama family's decode step on CUDA: q, k, v in one few-row product with the RMSNorm folded in,
// the rotation inside the attention kernel, SwiGLU in the gate/up product; the same tokens as the CPU's
// reference ops, in graphs and eagerly (Mistral's window of 8 passed, Qwen2's biases and GQA).
TEST(Generator, LlamaFamilyCudaStepsEqualTheCpu_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  const std::vector<std::vector<int32_t>> prompts = {{5, 17, 250}, {9}, {1, 2, 3, 4, 5, 6, 7, 8}};
  for (const char* preset : {"llama-tiny", "mistral-tiny", "qwen2-tiny"}) {
    SCOPED_TRACE(preset);
    torch::manual_seed(5);
    const auto model = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset(preset));
    model->module().eval();
    const auto on_cpu = llmtrain::infer::Generator(model).generate(prompts, 30, greedy());
    model->module().to(torch::kCUDA);
    llmtrain::infer::GeneratorOptions eager;
    eager.cuda_graph = false;
    llmtrain::infer::Generator graphed(model), stepwise(model, eager);
    EXPECT_EQ(graphed.generate(prompts, 30, greedy()), on_cpu);
    EXPECT_EQ(stepwise.generate(prompts, 30, greedy()), on_cpu);
    model->module().to(torch::kBFloat16);
    EXPECT_EQ(graphed.generate(prompts, 30, greedy()), stepwise.generate(prompts, 30, greedy()));
  }
}
