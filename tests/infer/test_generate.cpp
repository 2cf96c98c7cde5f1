#include <ATen/CPUGeneratorImpl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>

#include "llmtrain/infer/generate.h"
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
  o.stop_token = ids[3];
  EXPECT_EQ(llmtrain::infer::generate(model, prompt, 12, o).size(), 4u);  // stops after producing it
  auto gen = seeded(0);
  SamplingOptions bad;
  bad.top_p = 0;
  expect_error([&] { llmtrain::infer::sample(torch::zeros({1, 4}), bad, gen); }, {"top_p must be in (0, 1]"});
  expect_error([&] { llmtrain::infer::generate(model, {}, 3, o); }, {"prompt is empty"});
}
