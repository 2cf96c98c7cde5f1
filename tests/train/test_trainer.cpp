// The Trainer on the CPU: exact resume, metrics, checkpoint rotation and atomicity, signals, bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <csignal>
#include <fstream>
#include <random>
#include <sstream>

#include "llmtrain/data/shard.h"
#include "llmtrain/train/trainer.h"
#include "test_util.h"

using llmtrain::testing::expect_error;
using llmtrain::testing::TempDir;
using llmtrain::train::StepRecord;
using llmtrain::train::Trainer;
using llmtrain::train::TrainerConfig;

namespace {

struct RunFolder {
  TempDir dir;
  RunFolder() {
    std::mt19937 rng(0);
    const auto shard = [&](const std::string& name, int n) {
      std::vector<int32_t> t(static_cast<size_t>(n));
      // A learnable stream: each token determines the next (x -> 31 x + 7 mod 4099), from random starts.
      for (size_t i = 0; i < t.size(); ++i) t[i] = i % 64 == 0 ? int32_t(rng() % 4099) : int32_t((31 * t[i - 1] + 7) % 4099);
      llmtrain::data::write_shard(dir.path + "/" + name, t, 50257);
    };
    shard("train_000000.bin", 20000);
    shard("train_000001.bin", 15000);
    shard("val_000000.bin", 5000);
  }
  TrainerConfig config(const std::string& out, std::vector<std::string> extra = {}) const {
    std::vector<std::string> sets = {"data.train=" + dir.path + "/train_*.bin", "data.val=" + dir.path + "/val_*.bin",
                                     "out_dir=" + dir.path + "/" + out, "device=cpu"};
    sets.insert(sets.end(), extra.begin(), extra.end());
    return TrainerConfig::parse(R"({
      "model": {"preset": "tiny"},
      "train": {"batch_size": 4, "seq_len": 32, "total_batch_tokens": 256, "max_steps": 20, "lr": 1e-3,
                "warmup_steps": 2, "schedule": "cosine", "precision": "fp32", "seed": 7},
      "eval": {"every": 10, "batches": 2},
      "checkpoint": {"every": 5, "keep": 2}
    })", "test config", sets);
  }
};

std::vector<double> run_losses(Trainer& t, int64_t stop_at = -1) {
  std::vector<double> losses;
  t.on_step([&](const StepRecord& r) {
    losses.push_back(r.loss);
    if (r.step == stop_at) t.request_stop();
  });
  t.run();
  return losses;
}

std::vector<nlohmann::json> metrics(const std::string& out) {
  std::istringstream in(llmtrain::fs::read_file(out + "/metrics.jsonl"));
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

}  // namespace

TEST(Trainer, ResumeGivesExactlyTheLossesOfAnUninterruptedRun) {
  RunFolder run;
  Trainer full(run.config("full"));
  EXPECT_EQ(full.grad_accum_steps(), 2);
  const auto expected = run_losses(full);
  ASSERT_EQ(expected.size(), 20u);
  EXPECT_LT(expected.back(), expected.front());

  {
    Trainer first(run.config("split"));
    EXPECT_FALSE(first.resume_if_possible());
    EXPECT_EQ(run_losses(first, 10).size(), 10u);  // stops after step 10 and checkpoints
  }
  // A half-written checkpoint of a later step must never be picked up.
  const std::string ckpt = run.dir.path + "/split/checkpoints";
  llmtrain::fs::make_dirs(ckpt + "/step_00000015.tmp.12345");
  std::ofstream(ckpt + "/step_00000015.tmp.12345/state.json") << "{}";
  llmtrain::fs::make_dirs(ckpt + "/step_00000016");  // no state.json: incomplete
  Trainer second(run.config("split"));
  ASSERT_TRUE(second.resume_if_possible());
  EXPECT_EQ(second.step(), 10);
  const auto rest = run_losses(second);
  ASSERT_EQ(rest.size(), 10u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], expected[10 + i]) << "step " << 11 + i;  // bitwise
}

TEST(Trainer, MetricsLinesParseAndCheckpointsRotate) {
  RunFolder run;
  Trainer t(run.config("m"));
  run_losses(t);
  const auto lines = metrics(run.dir.path + "/m");
  int train = 0, eval = 0;
  for (const auto& j : lines) {
    if (j["type"] == "train") {
      ++train;
      for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"}) EXPECT_TRUE(j.contains(k)) << k;
    } else {
      ++eval;
      EXPECT_TRUE(j.contains("val_loss"));
      EXPECT_TRUE(j["step"] == 10 || j["step"] == 20);
    }
  }
  EXPECT_EQ(train, 20);
  EXPECT_EQ(eval, 2);
  const std::string ckpt = run.dir.path + "/m/checkpoints";
  EXPECT_FALSE(llmtrain::fs::exists(ckpt + "/step_00000010"));  // keep = 2
  EXPECT_TRUE(llmtrain::fs::exists(ckpt + "/step_00000015/state.json"));
  EXPECT_TRUE(llmtrain::fs::exists(ckpt + "/step_00000020/model.pt"));
  // The newest checkpoint's model is the trained model.
  auto loaded = llmtrain::train::load_checkpoint_model(run.dir.path + "/m");
  const auto idx = torch::randint(4099, {2, 16}, torch::kLong);
  torch::NoGradGuard no_grad;
  t.model()->eval();
  EXPECT_TRUE(torch::equal(loaded->forward(idx).logits, t.model()->forward(idx).logits));
  expect_error([&] { llmtrain::train::load_checkpoint_model(run.dir.path); }, {"neither a checkpoint folder"});
}

TEST(Trainer, SignalFinishesTheStepAndLeavesAResumableCheckpoint) {
  RunFolder run;
  {
    Trainer t(run.config("sig", {"checkpoint.every=0"}));
    t.on_step([](const StepRecord& r) {
      if (r.step == 3) std::raise(SIGINT);
    });
    EXPECT_EQ(t.run(), 3);
  }
  EXPECT_TRUE(llmtrain::fs::exists(run.dir.path + "/sig/checkpoints/step_00000003/state.json"));
  Trainer again(run.config("sig", {"checkpoint.every=0"}));
  ASSERT_TRUE(again.resume_if_possible());
  EXPECT_EQ(again.step(), 3);
  const auto lines = metrics(run.dir.path + "/sig");
  EXPECT_EQ(lines.size(), 3u);
}

TEST(Trainer, BadInputIsAClearErrorAndLosesNothing) {
  RunFolder run;
  expect_error([&] { Trainer t(run.config("x", {"data.train=" + run.dir.path + "/none_*.bin"})); }, {"no shard matches"});
  expect_error([&] { Trainer t(run.config("x", {"sample.every=5"})); }, {"sample.every 5", "not built yet"});
  expect_error([&] { Trainer t(run.config("x", {"train.total_batch_tokens=100"})); },
               {"total_batch_tokens 100", "batch_size x seq_len = 128"});
  {
    Trainer t(run.config("shape"));
    run_losses(t, 5);
  }
  expect_error([&] { Trainer t(run.config("shape", {"model.n_layer=3"})); t.resume_if_possible(); },
               {"step_00000005", "n_layer 2", "this config has 3"});
  const std::string state = run.dir.path + "/shape/checkpoints/step_00000005/state.json";
  const std::string saved = llmtrain::fs::read_file(state);
  std::ofstream(state) << R"({"format": "something-else"})";
  expect_error([&] { Trainer t(run.config("shape")); t.resume_if_possible(); }, {"not an llmtrain checkpoint"});
  std::ofstream(state) << saved;
  std::ofstream(run.dir.path + "/shape/checkpoints/step_00000005/model.pt") << "truncated";
  expect_error([&] { Trainer t(run.config("shape")); t.resume_if_possible(); }, {"step_00000005", "cannot load model.pt"});
}
