// The Trainer on the CPU: exact resume, metrics, checkpoint rotation and atomicity, signals, bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "llmtrain/config.h"
#include "llmtrain/data/shard.h"
#include "llmtrain/dist/communicator.h"
#include "llmtrain/infer/generate.h"
#include "llmtrain/io/hf_gpt2.h"
#include "llmtrain/nn/adapter.h"
#include "llmtrain/ops/dispatch.h"
#include "llmtrain/tokenizer/tokenizer.h"
#include "llmtrain/train/graphed_step.h"
#include "llmtrain/train/plot.h"
#include "llmtrain/train/trainer.h"
#include "test_util.h"
#include "train/run_folder.h"

using llmtrain::testing::expect_error;
using llmtrain::testing::RunFolder;
using llmtrain::testing::TempDir;
using llmtrain::train::StepRecord;
using llmtrain::train::Trainer;
using llmtrain::train::TrainerConfig;

namespace {

std::vector<double> run_losses(Trainer& t, int64_t stop_at = -1) {
  std::vector<double> losses;
  t.on_step([&](const StepRecord& r) {
    losses.push_back(r.loss);
    if (r.step == stop_at) t.request_stop();
  });
  t.run();
  return losses;
}

// A run stopped after step `stop_at` (it writes a checkpoint) and resumed by a new Trainer to its end
// (out_dir "split"): the resumed steps' losses.
std::vector<double> resumed_losses(const RunFolder& run, const std::vector<std::string>& sets, int64_t stop_at) {
  {
    Trainer first(run.config("split", sets));
    EXPECT_EQ(run_losses(first, stop_at).size(), size_t(stop_at));
  }
  Trainer second(run.config("split", sets));
  EXPECT_TRUE(second.resume_if_possible());
  EXPECT_EQ(second.step(), stop_at);
  return run_losses(second);
}

// The first moment of each tensor the Trainer's AdamW updates.
std::vector<torch::Tensor> first_moments(Trainer& t) {
  std::vector<torch::Tensor> out;
  for (const auto& [key, st] : t.optimizer().adamw().state())
    out.push_back(static_cast<torch::optim::AdamWParamState&>(*st).exp_avg());
  return out;
}

std::vector<nlohmann::json> metrics(const std::string& out) {
  std::istringstream in(llmtrain::fs::read_file(out + "/metrics.jsonl"));
  std::vector<nlohmann::json> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

// Ranks as threads of this process: every collective waits for all ranks, then each reads all ranks'
// tensors (summed in rank order, so every rank gets the same bits).
class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : n_(n), slots_(size_t(n)) {}

  class Comm final : public llmtrain::dist::Communicator {
   public:
    Comm(ThreadGroup& g, int r) : g_(g), r_(r) {}
    int rank() const override { return r_; }
    int world_size() const override { return g_.n_; }
    void all_reduce_sum(torch::Tensor& t) override {
      g_.exchange(r_, t, [&](const std::vector<torch::Tensor>& all) {
        torch::Tensor sum = all[0].clone();
        for (size_t i = 1; i < all.size(); ++i) sum += all[i];
        t.copy_(sum);
      });
    }
    void reduce_scatter_sum(const torch::Tensor& in, torch::Tensor& out) override {
      g_.exchange(r_, in, [&](const std::vector<torch::Tensor>& all) {
        torch::Tensor sum = all[0].clone();
        for (size_t i = 1; i < all.size(); ++i) sum += all[i];
        out.copy_(sum.view(-1).narrow(0, r_ * out.numel(), out.numel()).view_as(out));
      });
    }
    void all_gather(const torch::Tensor& in, torch::Tensor& out) override {
      g_.exchange(r_, in, [&](const std::vector<torch::Tensor>& all) {
        for (size_t i = 0; i < all.size(); ++i)
          out.view(-1).narrow(0, int64_t(i) * in.numel(), in.numel()).copy_(all[i].view(-1));
      });
    }
    void broadcast(torch::Tensor& t, int root) override {
      g_.exchange(r_, t, [&](const std::vector<torch::Tensor>& all) { t.copy_(all[size_t(root)]); });
    }
    void barrier() override {
      g_.exchange(r_, torch::zeros({1}), [](const std::vector<torch::Tensor>&) {});
    }

   private:
    ThreadGroup& g_;
    int r_;
  };

  /// Runs body(communicator) on n threads; rethrows the first failure.
  void run(const std::function<void(std::shared_ptr<llmtrain::dist::Communicator>)>& body) {
    std::vector<std::thread> threads;
    std::exception_ptr failure;
    for (int r = 0; r < n_; ++r)
      threads.emplace_back([&, r] {
        try {
          body(std::make_shared<Comm>(*this, r));
        } catch (...) {
          std::lock_guard<std::mutex> lock(m_);
          failure = std::current_exception();
        }
      });
    for (auto& t : threads) t.join();
    if (failure) std::rethrow_exception(failure);
  }

 private:
  template <typename F>
  void exchange(int r, const torch::Tensor& t, F&& read) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait(lock, [&] { return !draining_; });  // the previous collective is over for every rank
    slots_[size_t(r)] = t.detach().clone();
    if (++count_ == n_) {
      draining_ = true;
      cv_.notify_all();
    } else {
      cv_.wait(lock, [&] { return draining_; });
    }
    read(slots_);
    if (--count_ == 0) {
      draining_ = false;
      cv_.notify_all();
    }
  }

  int n_;
  std::vector<torch::Tensor> slots_;
  std::mutex m_;
  std::condition_variable cv_;
  int count_ = 0;
  bool draining_ = false;
};

// What each rank of an in-process group saw: its losses and one weight at the end.
struct RankRuns {
  std::vector<std::vector<double>> losses;
  std::vector<torch::Tensor> weights;
};

// Trainers of `config` on n thread ranks, built one after another (the model's initialisation draws
// from the global RNG); each resumes when `resume`, then runs (stopping after step `stop_at`).
RankRuns run_ranks(int n, const TrainerConfig& config, bool resume = false, int64_t stop_at = -1) {
  RankRuns out{std::vector<std::vector<double>>(size_t(n)), std::vector<torch::Tensor>(size_t(n))};
  ThreadGroup group(n);
  std::mutex m;
  std::condition_variable cv;
  int next = 0;
  group.run([&](std::shared_ptr<llmtrain::dist::Communicator> comm) {
    const int r = comm->rank();
    std::unique_ptr<Trainer> t;
    {
      std::unique_lock<std::mutex> lock(m);
      cv.wait(lock, [&] { return next == r; });
      try {
        t = std::make_unique<Trainer>(config, comm);
      } catch (...) {
        ++next;
        cv.notify_all();
        throw;
      }
      ++next;
      cv.notify_all();
    }
    if (resume) {
      EXPECT_TRUE(t->resume_if_possible());
    }
    out.losses[size_t(r)] = run_losses(*t, stop_at);
    out.weights[size_t(r)] = t->model().module().named_parameters()["transformer.h.0.mlp.c_fc.weight"].detach().clone();
  });
  return out;
}

std::string write_sft_jsonl(const std::string& path, int n) {
  std::ofstream out(path);
  const char* names[] = {"Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi"};
  for (int i = 0; i < n; ++i) {
    const std::string name = names[i % 8];
    out << nlohmann::json{{"prompt", "Name: " + name + "\nGreeting:"}, {"completion", " Hello, " + name + "!"}}.dump()
        << "\n";
  }
  return path;
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

// 8-bit AdamW moments (train.optimizer_state) in fp32 and bf16-master: the run learns, its checkpoint
// holds the 8-bit state and resumes to the bit, and a resume that asks for float32 moments is refused.
TEST(Trainer, EightBitOptimizerStateResumesExactly) {
  for (const char* precision : {"fp32", "bf16-master"}) {
    SCOPED_TRACE(precision);
    RunFolder run;
    const std::vector<std::string> sets = {"train.optimizer_state=8bit",
                                           "train.optimizer_8bit_min_size=512",
                                           std::string("train.precision=") + precision,
                                           "train.max_steps=12",
                                           "checkpoint.every=6",
                                           "train.lr=3e-3"};
    Trainer full(run.config("full", sets));
    const auto expected = run_losses(full);
    ASSERT_EQ(expected.size(), 12u);
    EXPECT_LT(expected.back(), expected.front());
    int64_t eight = 0;
    for (const auto& m : first_moments(full)) eight += m.scalar_type() == torch::kByte;
    EXPECT_GT(eight, 0);
    const auto rest = resumed_losses(run, sets, 6);
    ASSERT_EQ(rest.size(), 6u);
    for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], expected[6 + i]) << "step " << 7 + i;  // bitwise
    auto fp32 = sets;
    fp32[0] = "train.optimizer_state=fp32";
    Trainer other(run.config("split", fp32));
    expect_error([&] { other.resume_if_possible(); }, {"cannot resume", "train.optimizer_state: \"8bit\" -> \"fp32\""});
  }
}

// fp8 products (train.fp8; on the CPU the reference path of ops/fp8.h): the run learns, its scales follow
// the amaxes, its checkpoints keep them and resume to the bit, and the rules of its keys are named.
TEST(Trainer, Fp8RunsLearnAndResumeExactly) {
  {
    RunFolder run;
    const std::vector<std::string> sets = {"train.fp8=true", "train.precision=bf16-master", "train.max_steps=8",
                                           "checkpoint.every=4", "train.lr=3e-3"};
    Trainer full(run.config("full", sets));
    const auto expected = run_losses(full);
    ASSERT_EQ(expected.size(), 8u);
    EXPECT_LT(expected.back(), expected.front());
    int64_t layers = 0;
    for (const auto& b : full.model().module().named_buffers())
      if (b.key().find(".fp8.scale") != std::string::npos) {
        ++layers;
        EXPECT_EQ(b.value().scalar_type(), torch::kFloat) << b.key();
        EXPECT_FALSE(torch::equal(b.value(), torch::ones({3}))) << b.key() << ": updated from the amaxes";
      }
    EXPECT_GT(layers, 0);
    const auto rest = resumed_losses(run, sets, 4);
    ASSERT_EQ(rest.size(), 4u);
    for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], expected[4 + i]) << "step " << 5 + i;  // bitwise
    auto plain = sets;
    plain[0] = "train.fp8=false";
    Trainer bf16(run.config("bf16", plain));
    EXPECT_NE(run_losses(bf16), expected) << "fp8 changed the products";
    Trainer other(run.config("split", plain));
    expect_error([&] { other.resume_if_possible(); }, {"cannot resume", "train.fp8: true -> false"});
  }
  RunFolder run;
  expect_error([&] { run.config("x", {"train.fp8=true"}); },
               {"train.fp8 needs train.precision bf16-master", "got fp32"});
  expect_error(
      [&] {
        run.config("x", {"train.fp8=true", "train.precision=bf16-master", "peft.method=lora"});
      },
      {"train.fp8 trains full weights", "got lora"});
  expect_error([&] { run.config("x", {"train.fp8_history=0"}); }, {"train.fp8_history must be >= 1"});
}

// Each Llama-family tiny model trains through the same Trainer and resumes to the bit, its checkpoint
// recording its family and shape.
TEST(Trainer, LlamaFamilyModelsTrainAndResumeExactly) {
  for (const char* preset : {"llama-tiny", "mistral-tiny", "qwen2-tiny"}) {
    SCOPED_TRACE(preset);
    RunFolder run;
    // Ids 4099 and up never come: the first thing to learn.
    const std::vector<std::string> sets = {std::string("model.preset=") + preset,
                                           "model.vocab_size=8192",
                                           "train.max_steps=16",
                                           "checkpoint.every=8",
                                           "eval.every=8",
                                           "train.lr=3e-3"};
    Trainer full(run.config("full", sets));
    EXPECT_EQ(full.model().spec().family(), std::string(preset).substr(0, std::string(preset).find('-')));
    const auto expected = run_losses(full);
    ASSERT_EQ(expected.size(), 16u);
    const auto mean = [&](size_t from) { return (expected[from] + expected[from + 1] + expected[from + 2]) / 3; };
    EXPECT_LT(mean(13), mean(0) - 0.05);  // it learns
    const auto rest = resumed_losses(run, sets, 8);
    ASSERT_EQ(rest.size(), 8u);
    for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], expected[8 + i]) << "step " << 9 + i;  // bitwise
    // The checkpoint builds the model again by itself, equal to the trained one.
    const auto loaded = llmtrain::train::load_checkpoint_model(run.dir.path + "/split");
    EXPECT_TRUE(loaded->spec().same_shape(full.model().spec()));
    const auto idx = torch::randint(4099, {2, 16}, torch::kLong);
    torch::NoGradGuard no_grad;
    full.model().module().eval();
    EXPECT_TRUE(torch::equal(loaded->logits(idx), full.model().logits(idx)));
    // Another family's checkpoint is refused by name.
    auto gpt2 = run.config("split", {"train.max_steps=16", "checkpoint.every=8"});
    Trainer other(gpt2);
    expect_error([&] { other.resume_if_possible(); },
                 {"holds a model of", preset[0] == 'l' ? "llama:" : "", "this config has gpt2:"});
  }
}

// LoRA on a frozen base (GPT-2 in fp32 and in bf16-master, Llama on every linear layer, and QLoRA's
// NF4 base under each family, and its int8 base): the base never moves, the checkpoints hold the adapters as PEFT's
// files (no model.pt) and resume to the bit, and a checkpoint loads as its base with the adapters merged.
TEST(Trainer, LoraTrainsAFrozenBaseAndResumesExactly) {
  for (const std::string which :
       {"gpt2", "gpt2 bf16-master", "llama", "gpt2 qlora", "llama qlora bf16-master", "llama qlora-int8"}) {
    SCOPED_TRACE(which);
    RunFolder run;
    std::vector<std::string> sets = {"peft.method=lora",   "peft.r=4",     "peft.alpha=8", "train.max_steps=12",
                                     "checkpoint.every=6", "eval.every=6", "train.lr=1e-2"};
    const bool llama = which.rfind("llama", 0) == 0, qlora = which.find("qlora") != std::string::npos,
               bf16 = which.find("bf16-master") != std::string::npos;
    if (llama) {
      sets.insert(sets.end(),
                  {"model.preset=llama-tiny", "model.vocab_size=8192", "peft.target_modules=[\"all-linear\"]"});
    }
    if (bf16) sets.push_back("train.precision=bf16-master");
    if (qlora) sets[0] = "peft.method=qlora";
    if (which.find("int8") != std::string::npos) sets.push_back("peft.quantization=int8");
    Trainer full(run.config("full", sets));
    std::vector<torch::Tensor> before;  // every parameter as it starts
    for (const auto& p : full.model().module().named_parameters()) {
      before.push_back(p.value().detach().clone());
      EXPECT_EQ(p.value().requires_grad(), p.key().find(".adapter.lora_") != std::string::npos) << p.key();
    }
    if (qlora) {  // every linear layer's weight in NF4, its parameter left empty
      int64_t stored = 0;
      for (const auto& m : full.model().module().modules()) {
        auto* lin = m->as<torch::nn::Linear>();
        if (lin == nullptr || llmtrain::nn::stored_weight_of(*lin) == nullptr) continue;
        EXPECT_EQ(lin->weight.numel(), 0);
        ++stored;
      }
      EXPECT_EQ(stored, llama ? 2 * 7 : 2 * 4);
    }
    const auto expected = run_losses(full);
    ASSERT_EQ(expected.size(), 12u);
    // The adapters moved (B from zero), the base did not. (That they learn as PEFT's do: test_lora.cpp.)
    const auto after = full.model().module().parameters();
    for (size_t i = 0; i < after.size(); ++i) EXPECT_EQ(torch::equal(after[i], before[i]), !after[i].requires_grad());
    const std::string ckpt = run.dir.path + "/full/checkpoints/step_00000012";
    EXPECT_TRUE(llmtrain::fs::exists(ckpt + "/adapter_config.json"));
    EXPECT_TRUE(llmtrain::fs::exists(ckpt + "/adapter_model.safetensors"));
    EXPECT_FALSE(llmtrain::fs::exists(ckpt + "/model.pt"));
    const auto rest = resumed_losses(run, sets, 6);
    ASSERT_EQ(rest.size(), 6u);
    for (size_t s = 0; s < rest.size(); ++s) EXPECT_EQ(rest[s], expected[6 + s]) << "step " << 7 + s;  // bitwise
    // The checkpoint loads as the seeded base with its adapters merged: the trained model's logits.
    const auto loaded = llmtrain::train::load_checkpoint_model(ckpt);
    const auto idx = torch::randint(4099, {2, 16}, torch::kLong);
    torch::NoGradGuard no_grad;
    full.model().module().eval();
    loaded->module().eval();
    const auto want = full.model().logits(idx).to(torch::kFloat);
    if (bf16) loaded->module().to(torch::kBFloat16);
    EXPECT_LT(llmtrain::testing::max_abs_diff(loaded->logits(idx).to(torch::kFloat), want), bf16 ? 0.1 : 1e-4);
    // The adapter settings are part of what a resume must keep.
    auto changed = sets;
    changed[1] = "peft.r=8";
    Trainer other(run.config("split", changed));
    expect_error([&] { other.resume_if_possible(); }, {"peft.r: 4 -> 8"});
  }
}

// The same in fp16, whose loss scale and count of good steps are part of the state, and in
// bf16 autocast: the resumed steps' losses bitwise, and in fp16 the same scale step by step.
TEST(Trainer, ResumeIsExactInFp16AndBf16) {
  for (const char* precision : {"fp16", "bf16"}) {
    SCOPED_TRACE(precision);
    RunFolder run;
    // fp16 starts at a scale of 2^24, which overflows and is halved, and doubles after 3 good steps.
    const std::vector<std::string> sets = {std::string("train.precision=") + precision, "checkpoint.every=0",
                                           "train.loss_scale=16777216", "train.loss_scale_growth_interval=3"};
    Trainer full(run.config("full", sets));
    const auto expected = run_losses(full);
    ASSERT_EQ(expected.size(), 20u);
    const auto rest = resumed_losses(run, sets, 10);
    ASSERT_EQ(rest.size(), 10u);
    for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], expected[10 + i]) << "step " << 11 + i;  // bitwise
    if (std::string(precision) != "fp16") continue;
    const auto scales = [&](const std::string& out) {  // metrics.jsonl's loss scale of each step
      std::vector<double> v;
      for (const auto& line : metrics(run.dir.path + "/" + out))
        if (line["type"] == "train") v.push_back(line["loss_scale"].get<double>());
      return v;
    };
    const auto full_scales = scales("full");
    ASSERT_EQ(full_scales.size(), 20u);
    EXPECT_LT(full_scales[9], 16777216.0) << "the test means an fp16 run whose scale moved before the checkpoint";
    EXPECT_NE(std::set<double>(full_scales.begin() + 10, full_scales.end()).size(), 1u) << "and after it";
    EXPECT_EQ(scales("split"), full_scales);
  }
}

// A step's record is written once the next step's forward and backward are queued; a stop asked for
// from that record drops the queued work (its batches and random numbers given back), so the run
// stops exactly after the recorded step and resumes as if never stopped, dropout and the bf16 copies'
// stochastic rounding included.
TEST(Trainer, StopAskedBetweenCheckpointsDropsTheQueuedStepAndResumesExactly) {
  RunFolder run;
  const std::vector<std::string> sets = {"model.dropout=0.1", "checkpoint.every=0", "train.precision=bf16-master"};
  Trainer full(run.config("full", sets));
  const auto expected = run_losses(full);
  ASSERT_EQ(expected.size(), 20u);
  {
    Trainer first(run.config("split", sets));
    EXPECT_EQ(run_losses(first, 7).size(), 7u);
    EXPECT_EQ(first.step(), 7);
  }
  EXPECT_TRUE(llmtrain::fs::exists(run.dir.path + "/split/checkpoints/step_00000007/state.json"));
  Trainer second(run.config("split", sets));
  ASSERT_TRUE(second.resume_if_possible());
  EXPECT_EQ(second.step(), 7);
  const auto rest = run_losses(second);
  ASSERT_EQ(rest.size(), 13u);
  for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], expected[7 + i]) << "step " << 8 + i;  // bitwise
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
      for (const char* k : {"step", "loss", "lr", "grad_norm", "tokens_per_s", "elapsed_s"})
        EXPECT_TRUE(j.contains(k)) << k;
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
  t.model().module().eval();
  EXPECT_TRUE(torch::equal(loaded->logits(idx), t.model().logits(idx)));
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
  expect_error([&] { Trainer t(run.config("x", {"data.train=" + run.dir.path + "/none_*.bin"})); },
               {"no shard matches"});
  expect_error([&] { Trainer t(run.config("x", {"sample.every=5"})); }, {"sample.every > 0 needs tokenizer.kind"});
  expect_error([&] { Trainer t(run.config("x", {"train.total_batch_tokens=100"})); },
               {"total_batch_tokens 100", "batch_size x seq_len x ranks = 128"});
  {
    Trainer t(run.config("shape"));
    run_losses(t, 5);
  }
  // Each refusal leaves the run folder as it was, byte for byte.
  const std::string shape = run.dir.path + "/shape";
  auto before = llmtrain::testing::files_under(shape);
  expect_error(
      [&] {
        Trainer t(run.config("shape", {"model.n_layer=3"}));
        t.resume_if_possible();
      },
      {"step_00000005", "n_layer 2,", "this config has gpt2: vocab_size 50257, block_size 128, n_layer 3,"});
  EXPECT_EQ(llmtrain::testing::files_under(shape), before);
  const std::string state = shape + "/checkpoints/step_00000005/state.json";
  const std::string saved = llmtrain::fs::read_file(state);
  std::ofstream(state) << R"({"format": "something-else"})";
  before = llmtrain::testing::files_under(shape);
  expect_error(
      [&] {
        Trainer t(run.config("shape"));
        t.resume_if_possible();
      },
      {"not an llmtrain checkpoint"});
  EXPECT_EQ(llmtrain::testing::files_under(shape), before);
  std::ofstream(state) << saved;
  std::ofstream(shape + "/checkpoints/step_00000005/model.pt") << "truncated";
  before = llmtrain::testing::files_under(shape);
  expect_error(
      [&] {
        Trainer t(run.config("shape"));
        t.resume_if_possible();
      },
      {"step_00000005", "cannot load model.pt"});
  EXPECT_EQ(llmtrain::testing::files_under(shape), before);
}

TEST(Trainer, TwoRanksOnSplitBatchesTrainAsOneRankOnTheWholeBatch) {
  RunFolder run;
  // One rank: 2 micro-batches of 4 windows a step. Two ranks: each takes 4 of those 8 windows.
  Trainer one(run.config("one"));
  ASSERT_EQ(one.grad_accum_steps(), 2);
  const auto expected = run_losses(one);

  const auto [losses, weights] = run_ranks(2, run.config("two"));
  ASSERT_EQ(losses[0].size(), expected.size());
  EXPECT_EQ(losses[0], losses[1]);                    // every rank logs the same averaged loss
  EXPECT_TRUE(torch::equal(weights[0], weights[1]));  // and holds the same weights
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_NEAR(losses[0][i], expected[i], 1e-4) << "step " << i + 1;
  const auto w1 = one.model().module().named_parameters()["transformer.h.0.mlp.c_fc.weight"];
  EXPECT_LT((weights[0] - w1).abs().max().item<double>(), 1e-4);
  // Rank 0 alone wrote the metrics (one record per step, not two) and the checkpoints.
  const auto lines = metrics(run.dir.path + "/two"), one_lines = metrics(run.dir.path + "/one");
  EXPECT_EQ(std::count_if(lines.begin(), lines.end(), [](const auto& j) { return j["type"] == "train"; }), 20);
  ASSERT_EQ(lines.size(), one_lines.size());
  for (size_t i = 0; i < lines.size(); ++i)  // AdamW hides a gradient's scale; its norm does not
    if (lines[i]["type"] == "train") {
      EXPECT_NEAR(lines[i]["grad_norm"].get<double>(), one_lines[i]["grad_norm"].get<double>(),
                  1e-4 * one_lines[i]["grad_norm"].get<double>());
    }
  EXPECT_TRUE(llmtrain::fs::exists(run.dir.path + "/two/checkpoints/step_00000020/state.json"));
}

// eval.tasks on two ranks: each scores every other example and window, the sums are taken over the
// ranks, and rank 0's records hold the whole tasks' scores, as one rank's do.
TEST(Trainer, TwoRanksScoreTheEvaluationTasksAsOneRank) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  RunFolder run;
  std::string jsonl, text;
  const std::vector<std::string> words = {"state", "union", "people", "nation", "law", "peace", "trade", "war"};
  for (int i = 0; i < 9; ++i) {
    nlohmann::json endings = nlohmann::json::array();
    for (int e = 0; e < 3; ++e) endings.push_back(words[size_t(i + e) % 8] + " and " + words[size_t(i * e) % 8]);
    jsonl += nlohmann::json{{"ctx", "The " + words[size_t(i) % 8] + " of the"}, {"endings", endings}, {"label", i % 3}}
                 .dump() +
             "\n";
    text += "The " + words[size_t(i) % 8] + " of the " + words[size_t(i + 3) % 8] + " is strong. ";
  }
  llmtrain::fs::write_file_atomic(run.dir.path + "/hs.jsonl", jsonl);
  llmtrain::fs::write_file_atomic(run.dir.path + "/a.txt", text);
  const nlohmann::json tasks = {
      {{"task", "hellaswag"}, {"data", run.dir.path + "/hs.jsonl"}, {"batch", 2}},
      {{"task", "perplexity"}, {"data", run.dir.path + "/a.txt"}, {"window", 16}, {"stride", 5}}};
  const auto sets = [&](const std::string&) {
    return std::vector<std::string>{
        "eval.tasks=" + tasks.dump(), "tokenizer.kind=gpt2", "tokenizer.path=" + data + "/gpt2",
        "train.max_steps=4",          "eval.every=0",        "checkpoint.every=0"};
  };
  Trainer one(run.config("one", sets("one")));
  run_losses(one);
  run_ranks(2, run.config("two", sets("two")));
  const auto scores = [&](const std::string& out) {
    std::vector<nlohmann::json> r;
    for (const auto& j : metrics(run.dir.path + "/" + out))
      if (j["type"] == "eval_task") r.push_back(j);
    return r;
  };
  const auto a = scores("one"), b = scores("two");
  ASSERT_EQ(a.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0]["examples"], 9);
  EXPECT_EQ(b[1]["scored"], a[1]["scored"]);
  // The two runs' weights agree to about 1e-4 (their gradients are summed in another order).
  EXPECT_NEAR(b[1]["ppl"].get<double>(), a[1]["ppl"].get<double>(), 1e-3 * a[1]["ppl"].get<double>());
  for (const char* k : {"acc", "acc_norm", "acc_token"})
    EXPECT_NEAR(b[0][k].get<double>(), a[0][k].get<double>(), 0.12) << k;
}

// ZeRO-1 on two ranks: the same steps as plain data parallelism (the global norm is summed from the
// ranks' slices, so the last bits may differ), and a stop and resume that gives the uninterrupted
// losses bit for bit, in fp32 (masters are the slices themselves) and in bf16-master (fp32 master
// slices, stochastically rounded copies); a checkpoint of other ranks or unsharded is refused.
TEST(Trainer, ZeroShardedOptimizerTrainsAsDataParallelAndResumesExactly) {
  RunFolder run;
  const auto plain = run_ranks(2, run.config("plain"));
  const auto zero = run_ranks(2, run.config("zero", {"train.zero=true"}));
  ASSERT_EQ(zero.losses[0].size(), plain.losses[0].size());
  EXPECT_EQ(zero.losses[0], zero.losses[1]);
  EXPECT_TRUE(torch::equal(zero.weights[0], zero.weights[1])) << "the gather leaves every rank the same weights";
  for (size_t i = 0; i < plain.losses[0].size(); ++i)
    EXPECT_NEAR(zero.losses[0][i], plain.losses[0][i], 1e-5 * std::abs(plain.losses[0][i])) << "step " << i + 1;
  EXPECT_LT((zero.weights[0] - plain.weights[0]).abs().max().item<double>(), 1e-5);
  {  // bf16 weights from fp32 master slices, rounded to nearest (stochastic bits are keyed by slice)
    const std::vector<std::string> bf16 = {"train.precision=bf16-master", "train.rounding=nearest"};
    auto with_zero = bf16;
    with_zero.push_back("train.zero=true");
    const auto p16 = run_ranks(2, run.config("plain16", bf16)), z16 = run_ranks(2, run.config("zero16", with_zero));
    for (size_t i = 0; i < p16.losses[0].size(); ++i)
      EXPECT_NEAR(z16.losses[0][i], p16.losses[0][i], 5e-4) << "bf16, step " << i + 1;
    // The fp32 sums' order differs, so the bf16 forward passes see weights a bf16 step apart and the runs
    // drift a little (measured: weights 2.4e-4 apart at most, losses 1.2e-4). The bounds, 1e-3 for a
    // weight (one AdamW step: about lr) and 5e-4 for a loss, are about 4x that and far below what the
    // 20 steps move them (weights up to 2e-2, the loss 0.3).
    const auto z = z16.weights[0].to(torch::kFloat), p = p16.weights[0].to(torch::kFloat);
    EXPECT_LT((z - p).abs().max().item<double>(), 1e-3);
  }

  for (const char* precision : {"fp32", "bf16-master"}) {
    SCOPED_TRACE(precision);
    const std::vector<std::string> sets = {"train.zero=true", std::string("train.precision=") + precision,
                                           "checkpoint.every=0"};
    const auto full = run_ranks(2, run.config(std::string("full_") + precision, sets));
    const std::string split = std::string("split_") + precision;
    EXPECT_EQ(run_ranks(2, run.config(split, sets), false, 10).losses[0].size(), 10u);
    const std::string ckpt = run.dir.path + "/" + split + "/checkpoints/step_00000010";
    EXPECT_TRUE(llmtrain::fs::exists(ckpt + "/optimizer.rank00001.pt"));
    EXPECT_FALSE(llmtrain::fs::exists(ckpt + "/optimizer.pt"));
    const auto rest = run_ranks(2, run.config(split, sets), true);
    ASSERT_EQ(rest.losses[0].size(), 10u);
    for (size_t i = 0; i < 10; ++i) EXPECT_EQ(rest.losses[1][i], full.losses[1][10 + i]) << "step " << 11 + i;
    EXPECT_TRUE(torch::equal(rest.weights[0], full.weights[0]));
  }
  // Other ranks, or no sharding: a clear error, nothing overwritten (the run folder byte for byte).
  const std::string split = run.dir.path + "/split_fp32";
  const auto before = llmtrain::testing::files_under(split);
  expect_error([&] { run_ranks(1, run.config("split_fp32", {"train.zero=true"}), true); },
               {"sharded over 2 ranks (ZeRO-1)", "shards it over 1 ranks", "train.zero=true on 2 ranks"});
  EXPECT_EQ(llmtrain::testing::files_under(split), before);
  expect_error([&] { run_ranks(2, run.config("split_fp32"), true); },
               {"sharded over 2 ranks", "does not shard it", "train.zero=true on 2 ranks"});
  EXPECT_EQ(llmtrain::testing::files_under(split), before);
  expect_error([&] { Trainer t(run.config("alone", {"train.zero=true"})); }, {"train.zero", "no communicator"});
}

TEST(Trainer, SamplesDuringTrainingLeaveTheLossesAlone) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  RunFolder run;
  const std::vector<std::string> tok = {"tokenizer.kind=gpt2", "tokenizer.path=" + data + "/gpt2"};
  Trainer plain(run.config("plain", tok));
  const auto expected = run_losses(plain);
  auto sets = tok;
  sets.insert(sets.end(), {"sample.every=5", "sample.tokens=8", "sample.prompt=Hello"});
  Trainer sampled(run.config("sampled", sets));
  EXPECT_EQ(run_losses(sampled), expected);  // bitwise: sampling draws from its own generator
  int samples = 0;
  for (const auto& j : metrics(run.dir.path + "/sampled"))
    if (j["type"] == "sample") {
      ++samples;
      EXPECT_EQ(j["step"].get<int>() % 5, 0);
      EXPECT_EQ(j["text"].get<std::string>().rfind("Hello", 0), 0u) << j.dump();
      EXPECT_GT(j["text"].get<std::string>().size(), 5u);
    }
  EXPECT_EQ(samples, 4);
}

TEST(Trainer, FineTunesACheckpointOnSFTJsonl) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  RunFolder run;
  {
    Trainer base(run.config("base", {"tokenizer.kind=gpt2", "tokenizer.path=" + data + "/gpt2", "train.max_steps=5"}));
    base.run();
  }
  const std::string base_dir = run.dir.path + "/base";
  write_sft_jsonl(run.dir.path + "/sft.jsonl", 64);
  const std::string cfg_path = run.dir.path + "/finetune.json";
  std::ofstream(cfg_path) << nlohmann::json{
      {"data", {{"train", run.dir.path + "/sft.jsonl"}}},
      {"train",
       {{"batch_size", 8}, {"seq_len", 16}, {"max_steps", 30}, {"lr", 3e-3}, {"schedule", "constant"}, {"seed", 3}}},
      {"eval", {{"every", 0}, {"batches", 2}}},
      {"checkpoint", {{"every", 10}, {"keep", 1}}},
      {"out_dir", run.dir.path + "/ft"},
      {"device", "cpu"}};
  const auto cfg = llmtrain::train::finetune_config(base_dir, cfg_path);
  EXPECT_EQ(cfg.model.init_from, base_dir);
  EXPECT_EQ(cfg.tokenizer.kind, "gpt2");  // the checkpoint's
  EXPECT_TRUE(cfg.sft());
  Trainer ft(cfg);
  // The run starts from the checkpoint's weights.
  auto base_model = llmtrain::train::load_checkpoint_model(base_dir);
  for (const auto& p : base_model->module().named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), ft.model().module().named_parameters()[p.key()])) << p.key();
  const auto losses = run_losses(ft);
  ASSERT_EQ(losses.size(), 30u);
  EXPECT_LT(losses.back(), 0.5 * losses.front());  // the completions are a function of the prompt
  EXPECT_EQ(llmtrain::train::load_checkpoint_config(run.dir.path + "/ft").model.init_from, base_dir);

  std::ofstream(cfg_path + ".bad") << R"({"model": {"n_layer": 4}, "data": {"train": "x.jsonl"}})";
  expect_error([&] { llmtrain::train::finetune_config(base_dir, cfg_path + ".bad"); },
               {"finetune.json.bad", "model.n_layer cannot be set when fine-tuning"});
  expect_error(
      [&] {
        Trainer t(run.config("y", {"model.init_from=" + base_dir, "model.n_layer=3"}));
      },
      {"model.init_from", "n_layer"});
}

// Packed fine-tuning must teach what unpacked fine-tuning teaches: a prompt alone brings back its
// answer. Twenty arbitrary question/answer pairs are learnt by heart, packed several to a window and
// one to a window; greedy answers to each prompt, asked alone, are the same. (Packed windows whose
// examples see each other teach answers that lean on the examples before them: asked alone, most of
// them come out wrong, while the packed loss looks perfect.)
TEST(Trainer, PackedFineTuningLearnsWhatUnpackedLearns) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  RunFolder run;
  const char* words[] = {"amber",  "birch",   "cobalt",  "delta",   "ember",   "fjord",  "garnet",
                         "harbor", "indigo",  "juniper", "kestrel", "lagoon",  "meadow", "nimbus",
                         "onyx",   "prairie", "quartz",  "raven",   "saffron", "tundra"};
  std::vector<std::pair<std::string, std::string>> pairs;
  std::mt19937 rng(11);
  std::ofstream out(run.dir.path + "/qa.jsonl");
  for (int i = 0; i < 20; ++i) {
    pairs.emplace_back("Code " + std::to_string(100 + 37 * i) + " means:",
                       std::string(" ") + words[rng() % 20] + " " + words[rng() % 20] + " " + words[rng() % 20]);
    out << nlohmann::json{{"prompt", pairs.back().first}, {"completion", pairs.back().second}}.dump() << "\n";
  }
  out.close();
  const auto answers = [&](bool pack) {
    const std::string name = pack ? "packed" : "unpacked";
    Trainer t(run.config(
        name, {"data.train=" + run.dir.path + "/qa.jsonl",
               "data.val=", "data.pack=" + std::string(pack ? "true" : "false"), "data.shuffle=false",
               "tokenizer.kind=gpt2", "tokenizer.path=" + data + "/gpt2", "train.seq_len=32", "train.batch_size=4",
               "train.total_batch_tokens=0", "train.lr=3e-3", "train.warmup_steps=0", "train.schedule=constant",
               "train.max_steps=" + std::to_string(pack ? 80 : 160), "eval.every=0", "checkpoint.every=0"}));
    t.run();
    const auto tok = llmtrain::tokenizer::load_tokenizer("gpt2", data + "/gpt2");
    llmtrain::infer::SamplingOptions greedy;
    greedy.temperature = 0;
    greedy.stop_tokens = {50256};
    std::vector<std::string> got;
    for (const auto& [prompt, answer] : pairs) {
      const auto ids = tok->encode(prompt);
      auto out_ids = llmtrain::infer::generate(t.shared_model(), ids, 8, greedy);
      out_ids.erase(out_ids.begin(), out_ids.begin() + long(ids.size()));
      if (!out_ids.empty() && out_ids.back() == 50256) out_ids.pop_back();
      got.push_back(tok->decode(out_ids));
    }
    return got;
  };
  const auto unpacked = answers(false), packed = answers(true);
  int right = 0;
  for (size_t i = 0; i < pairs.size(); ++i) {
    right += unpacked[i] == pairs[i].second;
    EXPECT_EQ(packed[i], unpacked[i]) << pairs[i].first;
  }
  EXPECT_EQ(right, 20);  // learnt by heart
}

TEST(Trainer, DrawsTheLossCurves) {
  RunFolder run;
  Trainer t(run.config("plot", {"train.max_steps=10", "eval.every=5"}));
  t.run();
  const std::string svg = llmtrain::fs::read_file(run.dir.path + "/plot/loss.svg");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("<polyline"), std::string::npos);
  EXPECT_NE(svg.find("val loss"), std::string::npos);
  size_t circles = 0;
  for (size_t at = svg.find("<circle"); at != std::string::npos; at = svg.find("<circle", at + 1)) ++circles;
  EXPECT_EQ(circles, 2u);  // evaluations at steps 5 and 10
}

TEST(LossCurves, SkipCutLinesAndNonFiniteLosses) {
  const std::string text =
      "{\"type\":\"train\",\"step\":1,\"loss\":5.0}\n{\"type\":\"train\",\"step\":2,\"loss\":null}\n"
      "{\"type\":\"eval\",\"step\":2,\"val_loss\":4.5}\n{\"type\":\"train\",\"ste";
  const std::string svg = llmtrain::train::loss_curves_svg(text, "a <run>");
  EXPECT_NE(svg.find("a &lt;run&gt;"), std::string::npos);
  EXPECT_NE(svg.find("val loss 4.5000"), std::string::npos);
  EXPECT_NE(svg.find("train loss 5.0000"), std::string::npos);
  EXPECT_NE(llmtrain::train::loss_curves_svg("", "empty").find("no loss records yet"), std::string::npos);
}

TEST(GraphedStep, RejectsInputsOffTheGPU) {
#if !LLMTRAIN_WITH_CUDA
  GTEST_SKIP() << "built without CUDA: GraphedStep refuses to be made";
#endif
  auto w = torch::randn({3}, torch::requires_grad());
  llmtrain::train::GraphedStep g({w}, [&](const torch::Tensor& x, const torch::Tensor&) {
    const auto loss = (w * x).sum();
    loss.backward();
    return loss.detach();
  });
  expect_error([&] { g.run(torch::randn({3}), torch::zeros({3}, torch::kLong), true); }, {"one CUDA device"});
}

// The data loader's thread takes pinned host memory and copies from it while a micro-step is captured
// (its allocator queries events then): the capture is the capturing thread's alone and survives that.
TEST(GraphedStep, CapturesWhileAnotherThreadCopiesFromPinnedMemory_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  auto w = torch::randn({256}, cuda).requires_grad_();
  std::atomic<bool> stop{false};
  std::atomic<int64_t> rounds{0};
  std::thread other([&] {
    torch::NoGradGuard no_grad;
    while (!stop) {
      const auto host = torch::empty({1 << 16}, torch::TensorOptions().pinned_memory(true));
      const auto device = host.to(torch::kCUDA, /*non_blocking=*/true);
      ++rounds;
    }
  });
  llmtrain::train::GraphedStep g({w}, [&](const torch::Tensor& x, const torch::Tensor&) {
    auto y = x;
    for (int i = 0; i < 300; ++i) y = torch::tanh(y * w + 0.1);  // long enough to overlap the other thread
    const auto loss = y.sum();
    loss.backward();
    return loss.detach();
  });
  const auto x = torch::randn({256}, cuda), targets = torch::zeros({256}, cuda.dtype(torch::kLong));
  std::vector<float> losses;
  try {
    for (int i = 0; i < 6; ++i) {
      w.mutable_grad() = torch::Tensor();
      losses.push_back(g.run(x, targets, /*first=*/true).item<float>());
    }
  } catch (...) {
    stop = true;
    other.join();
    throw;
  }
  stop = true;
  other.join();
  EXPECT_GT(rounds.load(), 0);
  for (float l : losses) EXPECT_EQ(l, losses[0]) << "the replays compute what the eager call did";
}

TEST(Trainer, CudaGraphStepsEqualEagerSteps_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  // Two micro-steps a step (both graphs), dropout (the generator's offsets under replay), bf16 weights
  // with fp32 masters; then a stop between checkpoints, whose dropped step was a replay, and a resume.
  RunFolder run;
  const std::vector<std::string> sets = {"device=cuda", "train.precision=bf16-master", "model.dropout=0.1",
                                         "checkpoint.every=0", "train.max_steps=12"};
  const auto with = [&](std::vector<std::string> extra) {
    extra.insert(extra.begin(), sets.begin(), sets.end());
    return extra;
  };
  Trainer eager(run.config("eager", with({"train.cuda_graph=false"})));
  const auto want = run_losses(eager);
  Trainer eager2(run.config("eager2", with({"train.cuda_graph=false"})));
  const bool bitwise = run_losses(eager2) == want;  // are the kernels themselves reproducible here?
  std::printf("[   NOTE   ] eager runs equal bit for bit: %s\n", bitwise ? "yes, so the graphs must be too" : "no");
  Trainer graphed(run.config("graphed", with({})));
  ASSERT_EQ(graphed.grad_accum_steps(), 2);
  const auto got = run_losses(graphed);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (bitwise) EXPECT_EQ(got[i], want[i]) << "step " << i + 1;
    else EXPECT_NEAR(got[i], want[i], 2e-2 * std::abs(want[i])) << "step " << i + 1;
  }
  const auto pe = eager.model().module().parameters(), pg = graphed.model().module().parameters();
  for (size_t i = 0; i < pe.size(); ++i) {
    if (bitwise) EXPECT_TRUE(torch::equal(pe[i], pg[i])) << "parameter " << i;
    else
      EXPECT_TRUE(torch::allclose(pe[i].to(torch::kFloat), pg[i].to(torch::kFloat), 5e-2, 5e-3)) << "parameter " << i;
  }
  {
    Trainer first(run.config("split", with({})));
    EXPECT_EQ(run_losses(first, 5).size(), 5u);
  }
  Trainer second(run.config("split", with({})));
  ASSERT_TRUE(second.resume_if_possible());
  const auto rest = run_losses(second);
  ASSERT_EQ(rest.size(), 7u);
  for (size_t i = 0; i < rest.size(); ++i) {
    if (bitwise) EXPECT_EQ(rest[i], got[5 + i]) << "step " << 6 + i;
    else EXPECT_NEAR(rest[i], got[5 + i], 2e-2 * std::abs(got[5 + i])) << "step " << 6 + i;
  }
}

// A run stopped after `stop_at` steps and resumed gives the uninterrupted run's losses `want` (GPU runs:
// within 1e-3, and to the bit where two uninterrupted runs are equal bit for bit here).
void expect_resume_follows(const RunFolder& run, const std::vector<std::string>& sets, const std::vector<double>& want,
                           int64_t stop_at) {
  const auto rest = resumed_losses(run, sets, stop_at);
  ASSERT_EQ(rest.size(), want.size() - size_t(stop_at));
  for (size_t i = 0; i < rest.size(); ++i)
    EXPECT_NEAR(rest[i], want[stop_at + i], 1e-3 * std::abs(want[stop_at + i])) << i;
  Trainer again(run.config("again", sets));
  const bool bitwise = run_losses(again) == want;
  std::printf("[   NOTE   ] two runs equal bit for bit: %s\n", bitwise ? "yes" : "no");
  if (bitwise) {
    for (size_t i = 0; i < rest.size(); ++i) EXPECT_EQ(rest[i], want[stop_at + i]) << "step " << stop_at + 1 + i;
  }
}

// QLoRA on the GPU with the moments in 8 bits and paged into pinned host memory: the NF4 kernels in
// the forward and backward (CUDA graphs on), the 8-bit update over the bus; the run learns, its moments
// stay on the host, and a stop and resume gives the uninterrupted run's losses (to the bit where the
// kernels are reproducible here).
TEST(Trainer, QloraWithPagedEightBitMomentsOnTheGpu_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  RunFolder run;
  const std::vector<std::string> sets = {"device=cuda",
                                         "model.preset=llama-tiny",
                                         "model.vocab_size=8192",
                                         "train.precision=bf16-master",
                                         "peft.method=qlora",
                                         "peft.r=4",
                                         "peft.alpha=8",
                                         "peft.target_modules=[\"all-linear\"]",
                                         "train.lr=1e-2",
                                         "train.optimizer_state=8bit",
                                         "train.optimizer_8bit_min_size=256",
                                         "train.optimizer_paged=true",
                                         "train.max_steps=12",
                                         "checkpoint.every=6"};
  Trainer full(run.config("full", sets));
  const auto want = run_losses(full);
  ASSERT_EQ(want.size(), 12u);
  EXPECT_LT(want.back(), want.front());
  int64_t paged_8bit = 0;
  for (const auto& m : first_moments(full)) {
    EXPECT_TRUE(m.is_cpu() && m.is_pinned());
    paged_8bit += m.scalar_type() == torch::kByte;
  }
  EXPECT_GT(paged_8bit, 0);
  expect_resume_follows(run, sets, want, 6);
}

// fp8 on the GPU (the casts and cuBLASLt's fp8 products, the scales moved on in one launch, CUDA graphs
// on): a GPT-2 and a Llama-family tiny model learn, follow the reference path's losses (the same codes,
// other sums), and a stop and resume gives the uninterrupted run's losses.
TEST(Trainer, Fp8OnTheGpuFollowsTheReferencePathAndResumes_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  for (const char* preset : {"tiny", "llama-tiny"}) {
    SCOPED_TRACE(preset);
    RunFolder run;
    const std::vector<std::string> sets = {"device=cuda",
                                           std::string("model.preset=") + preset,
                                           "model.vocab_size=4099",
                                           "train.fp8=true",
                                           "train.precision=bf16-master",
                                           "train.max_steps=10",
                                           "checkpoint.every=5",
                                           "train.lr=3e-3"};
    Trainer full(run.config("full", sets));
    const auto want = run_losses(full);
    ASSERT_EQ(want.size(), 10u);
    EXPECT_LT(want.back(), want.front());
    llmtrain::ops::set_cuda_kernel_enabled("fp8", false);  // the reference path
    Trainer reference(run.config("reference", sets));
    const auto ref = run_losses(reference);
    llmtrain::ops::set_cuda_kernel_enabled("fp8", true);  // as at start
    ASSERT_EQ(ref.size(), want.size());
    EXPECT_NE(ref, want) << "both runs took the reference path";
    for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(want[i], ref[i], 2e-2 * std::abs(ref[i])) << "step " << i + 1;
    expect_resume_follows(run, sets, want, 5);
  }
}

TEST(Trainer, StartsFromHuggingFaceAndConvertedCheckpoints) {
  RunFolder run;
  torch::manual_seed(11);
  llmtrain::nn::GPT2 model(llmtrain::nn::GPT2Config::preset("tiny").block_size(64));  // under the default seq_len
  const std::string hf = run.dir.path + "/hf", native = run.dir.path + "/native";
  llmtrain::io::save_hf_gpt2(model, hf);
  // load_model takes either kind; the model-only checkpoint reads back equal.
  llmtrain::train::save_model_checkpoint(model.ptr(), native);
  for (const auto& path : {hf, native}) {
    auto back = llmtrain::train::load_model(path);
    for (const auto& p : model->named_parameters())
      EXPECT_TRUE(torch::equal(back->module().named_parameters()[p.key()], p.value())) << path << " " << p.key();
  }
  // A fine-tuning run from the Hugging Face folder starts from its weights, with GPT-2's tokenizer.
  const std::string cfg_path = run.dir.path + "/ft.json";
  std::ofstream(cfg_path)
      << R"({"train": {"batch_size": 4, "seq_len": 32, "max_steps": 2}, "tokenizer": {"kind": ""}})";
  auto cfg = llmtrain::train::finetune_config(
      hf, cfg_path,
      {"data.train=" + run.dir.path + "/train_*.bin", "data.val=" + run.dir.path + "/val_*.bin",
       "out_dir=" + run.dir.path + "/ft", "device=cpu"});
  EXPECT_EQ(cfg.model.init_from, hf);
  EXPECT_EQ(cfg.model.n_embd, 64);
  Trainer t(cfg);
  for (const auto& p : model->named_parameters())
    EXPECT_TRUE(torch::equal(t.model().module().named_parameters()[p.key()], p.value())) << p.key();
  // A converted checkpoint is not a run to resume.
  llmtrain::fs::make_dirs(run.dir.path + "/resume/checkpoints");
  llmtrain::train::save_model_checkpoint(model.ptr(), run.dir.path + "/resume/checkpoints/step_00000000");
  Trainer r(run.config("resume"));
  expect_error([&] { r.resume_if_possible(); }, {"holds a model alone", "finetune --from"});
}

// Every field of a checkpoint's state.json, missing, of the wrong type and out of range: an error that
// names the file and the key, never a crash or a run resumed from nonsense (a negative step once gave
// a negative learning rate).
TEST(Trainer, EveryStateFieldWrongIsNamed) {
  RunFolder run;
  {
    Trainer t(run.config("state", {"train.max_steps=5"}));
    t.run();
  }
  const std::string dir = run.dir.path + "/state/checkpoints/step_00000005", path = dir + "/state.json";
  const auto good = nlohmann::json::parse(llmtrain::fs::read_file(path));
  const auto with = [&](const std::vector<std::string>& key, const nlohmann::json* value, const std::string& want) {
    auto j = good;
    nlohmann::json* parent = &j;
    for (size_t i = 0; i + 1 < key.size(); ++i) parent = &(*parent)[key[i]];
    if (value) (*parent)[key.back()] = *value;
    else parent->erase(key.back());
    llmtrain::fs::write_file_atomic(path, j.dump());
    std::string name;
    for (const auto& k : key) name += (name.empty() ? "" : ".") + k;
    SCOPED_TRACE(name + " = " + (value ? value->dump() : "(missing)"));
    expect_error(
        [&] {
          Trainer t(run.config("state", {"train.max_steps=5"}));
          t.resume_if_possible();
        },
        {path, want.empty() ? name : want});
  };
  const nlohmann::json text = "x", negative = -5, huge = uint64_t(1) << 63, fraction = 0.5, list = {1, 2};
  const std::vector<std::vector<std::string>> numbers = {{"step"},
                                                         {"elapsed_s"},
                                                         {"zero_ranks"},
                                                         {"scaler", "scale"},
                                                         {"scaler", "good_steps"},
                                                         {"train_loader", "epoch"},
                                                         {"train_loader", "shard"},
                                                         {"train_loader", "position"},
                                                         {"model", "vocab_size"},
                                                         {"model", "block_size"},
                                                         {"model", "n_layer"},
                                                         {"model", "n_head"},
                                                         {"model", "n_embd"}};
  for (const auto& key : numbers) {
    with(key, nullptr, "");
    for (const auto* v : {&text, &negative, &list}) with(key, v, "");
  }
  for (const auto& key : std::vector<std::vector<std::string>>{{"step"}, {"zero_ranks"}, {"train_loader", "epoch"}})
    with(key, &fraction, "");
  with({"step"}, &huge, "step must be an integer in [0, 9223372036854775807]");
  with({"precision"}, &text, "precision \"x\" is not one of");
  with({"precision"}, &negative, "precision must be a string");
  with({"config"}, &text, "config must be a JSON object");
  with({"config"}, nullptr, "config is missing");
  with({"format"}, &text, "not an llmtrain checkpoint state");
  with({"version"}, &huge, "not an llmtrain checkpoint state");
  with({"scaler"}, &list, "scaler must be a JSON object");
  with({"model_only"}, &text, "model_only must be true or false");
  llmtrain::fs::write_file_atomic(path, good.dump());
  Trainer t(run.config("state", {"train.max_steps=5"}));
  EXPECT_TRUE(t.resume_if_possible());  // and the file as written resumes
}
