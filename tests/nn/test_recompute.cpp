// Activation recompute (nn/recompute.h): every mode gives the same loss and the same gradients, bit for
// bit, as keeping every activation, for GPT-2 and the Llama family, packed documents and LoRA adapters
// included; it keeps less for backward; a model with dropout refuses it; the Trainer's steps are the same.
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "llmtrain/config.h"  // LLMTRAIN_WITH_CUDA
#if LLMTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include "llmtrain/nn/causal_lm.h"
#include "llmtrain/peft/lora.h"
#include "llmtrain/train/trainer.h"
#include "test_util.h"
#include "train/run_folder.h"

using llmtrain::nn::Recompute;
using llmtrain::testing::expect_error;

namespace {

struct Grads {
  double loss;
  std::vector<std::pair<std::string, torch::Tensor>> grads;
};

// One forward and backward of a fresh model of `preset` (seeded) with recompute `r`; with `autocast`, the
// forward under the CPU's bf16 autocast and the backward outside it (as backward runs on a thread of its own
// on a GPU, where autocast is off).
Grads step(const std::string& preset, Recompute r, bool packed, bool lora, bool autocast = false) {
  torch::manual_seed(11);
  auto model = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset(preset));
  if (lora) {
    llmtrain::peft::LoraConfig cfg;
    cfg.all_linear = true;
    cfg.init = llmtrain::peft::LoraInit::kRandom;
    llmtrain::peft::add_lora(*model, cfg);
  }
  model->set_recompute(r);
  model->module().train();
  const int64_t B = 3, T = 40;
  const auto idx = torch::randint(model->vocab_size(), {B, T + 1}, torch::kLong);
  torch::Tensor positions;
  if (packed)  // two documents a row: 0..16, then 0..22
    positions = torch::cat({torch::arange(17), torch::arange(23)}).unsqueeze(0).expand({B, T}).contiguous();
  at::autocast::set_autocast_enabled(at::kCPU, autocast);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  const auto loss = model->loss(idx.narrow(1, 0, T), idx.narrow(1, 1, T), positions);
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  loss.backward();
  Grads out{loss.item<double>(), {}};
  for (const auto& p : model->module().named_parameters())
    if (p.value().grad().defined()) out.grads.push_back({p.key(), p.value().grad().clone()});
  return out;
}

}  // namespace

TEST(Recompute, EveryModeGivesTheSameLossAndGradientsBitForBit) {
  for (const std::string preset : {"tiny", "llama-tiny", "qwen2-tiny"})
    for (bool packed : {false, true})
      for (bool lora : {false, true}) {
        const Grads kept = step(preset, Recompute::kNone, packed, lora);
        ASSERT_FALSE(kept.grads.empty());
        for (Recompute r : {Recompute::kMlp, Recompute::kBlock}) {
          SCOPED_TRACE(preset + " " + llmtrain::Choice<Recompute>(r).name() + (packed ? " packed" : "") +
                       (lora ? " lora" : ""));
          const Grads again = step(preset, r, packed, lora);
          EXPECT_EQ(again.loss, kept.loss);
          ASSERT_EQ(again.grads.size(), kept.grads.size());
          for (size_t i = 0; i < kept.grads.size(); ++i) {
            EXPECT_EQ(again.grads[i].first, kept.grads[i].first);
            EXPECT_TRUE(torch::equal(again.grads[i].second, kept.grads[i].second)) << kept.grads[i].first;
          }
        }
      }
}

TEST(Recompute, TheForwardsAutocastHoldsWhenBackwardRecomputes) {
  for (const std::string preset : {"tiny", "llama-tiny"}) {
    const Grads kept = step(preset, Recompute::kNone, false, false, /*autocast=*/true);
    for (Recompute r : {Recompute::kMlp, Recompute::kBlock}) {
      SCOPED_TRACE(preset + " " + llmtrain::Choice<Recompute>(r).name());
      const Grads again = step(preset, r, false, false, /*autocast=*/true);
      EXPECT_EQ(again.loss, kept.loss);
      ASSERT_EQ(again.grads.size(), kept.grads.size());
      for (size_t i = 0; i < kept.grads.size(); ++i)
        EXPECT_TRUE(torch::equal(again.grads[i].second, kept.grads[i].second)) << kept.grads[i].first;
    }
  }
}

TEST(Recompute, KeepsLessForBackward_CUDA) {
#if !LLMTRAIN_WITH_CUDA
  GTEST_SKIP() << "built without CUDA";
#else
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  // What a forward leaves allocated until backward: the activations autograd keeps. The classifier's
  // logits (412 MB here) are kept in every mode, so the blocks' share is taken as the difference
  // between 12 and 6 layers: six layers' activations.
  const auto kept_bytes = [](Recompute r, int64_t layers) {
    torch::manual_seed(3);
    auto model = llmtrain::nn::make_model(llmtrain::nn::GPT2Config::preset("gpt2").n_layer(layers));
    model->module().to(torch::kCUDA, torch::kBFloat16);
    model->set_recompute(r);
    const auto idx = torch::randint(model->vocab_size(), {4, 1025}, torch::kLong).cuda();
    torch::cuda::synchronize();
    const int64_t before = int64_t(c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current);
    auto loss = model->loss(idx.narrow(1, 0, 1024), idx.narrow(1, 1, 1024), {});
    torch::cuda::synchronize();
    return int64_t(c10::cuda::CUDACachingAllocator::getDeviceStats(0).allocated_bytes[0].current) - before;
  };
  const auto six_layers = [&](Recompute r) { return kept_bytes(r, 12) - kept_bytes(r, 6); };
  const int64_t none = six_layers(Recompute::kNone), mlp = six_layers(Recompute::kMlp),
                block = six_layers(Recompute::kBlock);
  EXPECT_LT(mlp, none * 3 / 4) << none << " bytes kept by six layers without recompute, " << mlp << " with mlp";
  EXPECT_LT(block, mlp / 2) << block << " bytes with block";
#endif
}

TEST(Recompute, DropoutIsRefusedNamingIt) {
  auto gpt2 = llmtrain::nn::make_model(llmtrain::nn::ModelSpec(llmtrain::nn::GPT2Config::preset("tiny").dropout(0.1)));
  expect_error([&] { gpt2->set_recompute(Recompute::kMlp); }, {"recompute (mlp) needs dropout 0", "got 0.1"});
  gpt2->set_recompute(Recompute::kNone);
  llmtrain::testing::RunFolder run;
  expect_error(
      [&] {
        run.config("x", {"train.recompute=block", "model.dropout=0.1"});
      },
      {"train.recompute block needs model.dropout 0", "got 0.1"});
  expect_error(
      [&] {
        run.config("x", {"train.recompute=mlp", "peft.method=lora", "peft.dropout=0.05"});
      },
      {"train.recompute mlp needs peft.dropout 0", "got 0.05"});
  expect_error([&] { run.config("x", {"train.recompute=some"}); }, {"train.recompute must be none, mlp or block"});
}

TEST(Recompute, TheTrainersStepsAreTheSame) {
  llmtrain::testing::RunFolder run;
  const auto losses = [&](const std::string& out, const std::string& mode) {
    llmtrain::train::Trainer t(
        run.config(out, {"train.recompute=" + mode, "train.max_steps=6", "eval.every=0", "checkpoint.every=0"}));
    std::vector<double> l;
    t.on_step([&](const llmtrain::train::StepRecord& r) { l.push_back(r.loss); });
    t.run();
    return l;
  };
  const auto kept = losses("none", "none");
  ASSERT_EQ(kept.size(), 6u);
  EXPECT_EQ(losses("block", "block"), kept);
  EXPECT_EQ(losses("mlp", "mlp"), kept);
}
