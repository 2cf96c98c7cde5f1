// The optimizer loop: schedules at chosen steps, GPT-2's parameter groups, clipping, the GradScaler,
// accumulation against one big batch, and every precision mode training a tiny model.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "llmtrain/nn/gpt2.h"
#include "llmtrain/optim/optimizer.h"
#include "llmtrain/optim/schedule.h"
#include "test_util.h"

using namespace llmtrain::optim;
using llmtrain::nn::GPT2;
using llmtrain::nn::GPT2Config;
using llmtrain::testing::expect_error;

namespace {

LRSchedule schedule(ScheduleKind kind) {
  LRSchedule s;
  s.kind = kind;
  s.lr = 1e-3;
  s.warmup_steps = 10;
  s.max_steps = 110;
  s.min_lr_frac = 0.1;
  return s;
}

std::vector<torch::Tensor> snapshot(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

}  // namespace

TEST(Schedule, ValuesAtChosenSteps) {
  for (auto kind : {ScheduleKind::kConstant, ScheduleKind::kCosine, ScheduleKind::kLinear, ScheduleKind::kWSD}) {
    const auto s = schedule(kind);
    EXPECT_DOUBLE_EQ(s.at(0), 1e-4);  // warmup: lr * (s + 1) / warmup
    EXPECT_DOUBLE_EQ(s.at(4), 5e-4);
    EXPECT_DOUBLE_EQ(s.at(9), 1e-3);
    EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  }
  EXPECT_DOUBLE_EQ(schedule(ScheduleKind::kConstant).at(100), 1e-3);
  const auto cosine = schedule(ScheduleKind::kCosine);
  EXPECT_NEAR(cosine.at(60), 5.5e-4, 1e-15);  // halfway
  EXPECT_NEAR(cosine.at(35), 1e-4 + 0.5 * (1 + std::cos(M_PI / 4)) * 9e-4, 1e-15);
  EXPECT_NEAR(cosine.at(110), 1e-4, 1e-15);
  EXPECT_NEAR(cosine.at(500), 1e-4, 1e-15);  // stays at min_lr
  const auto linear = schedule(ScheduleKind::kLinear);
  EXPECT_NEAR(linear.at(35), 7.75e-4, 1e-15);
  EXPECT_NEAR(linear.at(110), 1e-4, 1e-15);
  const auto wsd = schedule(ScheduleKind::kWSD);  // decays over the last 22 steps, from step 88
  EXPECT_DOUBLE_EQ(wsd.at(87), 1e-3);
  EXPECT_NEAR(wsd.at(99), 5.5e-4, 1e-15);
  EXPECT_NEAR(wsd.at(110), 1e-4, 1e-15);
  EXPECT_EQ(parse_schedule("wsd"), ScheduleKind::kWSD);
  expect_error([] { parse_schedule("step"); }, {"schedule \"step\""});
  auto bad = cosine;
  bad.min_lr_frac = 2;
  expect_error([&] { bad.validate(); }, {"min_lr_frac", "2"});
}

TEST(Optimizer, WeightDecayOnlyOnMatricesAndEmbeddings) {
  torch::manual_seed(0);
  GPT2 model(GPT2Config::preset("tiny"));
  std::vector<torch::Tensor> decay, no_decay;
  split_decay(model->parameters(), decay, no_decay);
  EXPECT_EQ(decay.size(), 2u + 4 * 2);     // wte, wpe, 4 matrices per block
  EXPECT_EQ(no_decay.size(), 2u + 8 * 2);  // ln_f, and per block 2 layer norms x 2 + 4 biases
  for (const auto& p : decay) EXPECT_EQ(p.dim(), 2);
  for (const auto& p : no_decay) EXPECT_EQ(p.dim(), 1);

  // With zero gradients AdamW's update is pure decoupled decay: p *= 1 - lr * wd, on the decay group only.
  OptimizerOptions o;
  o.schedule.lr = 0.01;
  o.weight_decay = 0.5;
  MixedPrecisionOptimizer opt(*model, o);
  const auto before = snapshot(*model);
  for (auto& p : model->parameters()) p.mutable_grad() = torch::zeros_like(p);
  opt.step(0);
  const auto params = model->parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const double factor = params[i].dim() >= 2 ? 1 - 0.01 * 0.5 : 1.0;
    EXPECT_TRUE(torch::allclose(params[i], before[i] * factor, 1e-6, 1e-9)) << i;
  }
}

TEST(Optimizer, ClipsTheGlobalNorm) {
  // A large eps makes Adam's first update proportional to the gradient, so clipping shows in it.
  const auto run = [](double clip, double* norm) {
    torch::nn::Linear lin(4, 3);
    {
      torch::NoGradGuard no_grad;
      lin->weight.fill_(1.0);
      lin->bias.fill_(1.0);
    }
    OptimizerOptions o;
    o.schedule.lr = 1.0;
    o.eps = 1e3;
    o.weight_decay = 0;
    o.grad_clip = clip;
    MixedPrecisionOptimizer opt(*lin, o);
    lin->weight.mutable_grad() = torch::full({3, 4}, 2.0);  // norm sqrt(12 * 4 + 3 * 4) = sqrt(60)
    lin->bias.mutable_grad() = torch::full({3}, 2.0);
    *norm = opt.step(0).grad_norm;
    return 1.0 - lin->weight[0][0].item<double>();  // the update
  };
  double norm_clipped = 0, norm_free = 0;
  const double clipped = run(1.0, &norm_clipped), free = run(0.0, &norm_free);
  EXPECT_NEAR(norm_clipped, std::sqrt(60.0), 1e-5);
  EXPECT_NEAR(norm_free, std::sqrt(60.0), 1e-5);
  const double g = 2.0, gc = g * 1.0 / (std::sqrt(60.0) + 1e-6);           // each gradient entry, clipped
  EXPECT_NEAR(clipped / free, (gc / (gc + 1e3)) / (g / (g + 1e3)), 5e-5);  // float32 parameters
}

TEST(GradScaler, SkipsBacksOffAndGrows) {
  GradScalerOptions so;
  so.init_scale = 1024;
  so.growth_interval = 3;
  GradScaler scaler(so);
  EXPECT_EQ(scaler.scale(torch::tensor(2.0)).item<double>(), 2048.0);
  auto g = torch::full({4}, 512.0);
  EXPECT_FALSE(scaler.unscale_({g}));
  EXPECT_TRUE(torch::equal(g, torch::full({4}, 0.5)));
  auto bad = torch::tensor({1.0, std::nan("")});
  EXPECT_TRUE(scaler.unscale_({g, bad}));
  scaler.update(false);
  scaler.update(false);
  EXPECT_EQ(scaler.scale_value(), 1024);
  scaler.update(false);
  EXPECT_EQ(scaler.scale_value(), 2048);  // grown after 3 good steps
  scaler.update(false);
  scaler.update(true);
  EXPECT_EQ(scaler.scale_value(), 1024);  // backed off, good-step count reset
  EXPECT_EQ(scaler.good_steps(), 0);
}

TEST(Optimizer, Fp16StepWithInfGradientIsANoOpAndBacksOff) {
  torch::manual_seed(1);
  torch::nn::Linear lin(4, 4);
  OptimizerOptions o;
  o.precision = Precision::kFP16;
  MixedPrecisionOptimizer opt(*lin, o);
  const auto before = snapshot(*lin);
  lin->weight.mutable_grad() = torch::randn({4, 4});
  lin->bias.mutable_grad() = torch::full({4}, INFINITY);
  const auto info = opt.step(0);
  EXPECT_TRUE(info.skipped);
  EXPECT_EQ(info.loss_scale, 32768.0);
  EXPECT_TRUE(torch::equal(lin->weight, before[0]));
  EXPECT_TRUE(torch::equal(lin->bias, before[1]));
  EXPECT_FALSE(lin->weight.grad().defined());  // gradients are cleared either way
}

TEST(Optimizer, AccumulatedHalvesEqualOneBigBatch) {
  torch::manual_seed(2);
  const auto cfg = GPT2Config::preset("tiny");
  GPT2 big(cfg);
  auto acc = std::dynamic_pointer_cast<llmtrain::nn::GPT2Impl>(big->clone());
  const auto idx = torch::randint(cfg.vocab_size(), {4, 32}, torch::kLong);
  const auto tgt = torch::randint(cfg.vocab_size(), {4, 32}, torch::kLong);
  big->forward(idx, tgt).loss.backward();
  for (int half = 0; half < 2; ++half)  // each micro-batch's mean loss, divided by the micro-steps
    (acc->forward(idx.narrow(0, 2 * half, 2), tgt.narrow(0, 2 * half, 2)).loss / 2).backward();
  const auto a = big->named_parameters(), b = acc->named_parameters();
  const double norm = global_grad_norm(big->parameters()).item<double>();
  EXPECT_NEAR(global_grad_norm(acc->parameters()).item<double>(), norm, 1e-5 * norm);
  for (const auto& item : a) {
    const auto& ga = item.value().grad();
    const auto& gb = b[item.key()].grad();
    EXPECT_LT((ga - gb).abs().max().item<double>(), 1e-5 * ga.abs().max().item<double>() + 1e-9) << item.key();
  }
}

TEST(Optimizer, EveryPrecisionModeTrainsATinyModel) {
  for (const char* mode : {"fp32", "bf16", "fp16", "bf16-master"}) {
    torch::manual_seed(3);
    const auto cfg = GPT2Config::preset("tiny");
    GPT2 model(cfg);
    OptimizerOptions o;
    o.precision = parse_precision(mode);
    o.schedule.lr = 3e-3;
    o.weight_decay = 0;
    MixedPrecisionOptimizer opt(*model, o);
    const auto idx = torch::randint(cfg.vocab_size(), {2, 32}, torch::kLong);
    double first = 0, last = 0;
    int skipped = 0;
    // The products ran in the mode's dtype: autocast (bf16, fp16) or the bf16 weights (bf16-master).
    const auto want = o.precision == Precision::kFP32   ? torch::kFloat
                      : o.precision == Precision::kFP16 ? torch::kHalf
                                                        : torch::kBFloat16;
    for (int step = 0; step < 40; ++step) {
      torch::Tensor loss;
      {
        AutocastScope amp(torch::kCPU, o.precision);
        const auto out = model(idx, idx);
        EXPECT_EQ(out.logits.scalar_type(), want) << mode;
        loss = out.loss;
      }
      opt.scale_loss(loss).backward();
      skipped += opt.step(step).skipped;
      (step == 0 ? first : last) = loss.item<double>();
    }
    EXPECT_LT(last, first - 3.0) << mode;
    EXPECT_LE(skipped, 2) << mode;
    if (o.precision == Precision::kBF16Master) {
      EXPECT_EQ(model->parameters()[0].scalar_type(), torch::kBFloat16);
      EXPECT_EQ(opt.master_params()[0].scalar_type(), torch::kFloat);
      // Rounded stochastically: each copy is one of its master's two bf16 neighbours, not always the nearer.
      const auto param = model->parameters()[0].to(torch::kFloat), master = opt.master_params()[0];
      EXPECT_TRUE(((param - master).abs() <= master.abs() * std::ldexp(1.0, -7)).all().item<bool>());
      EXPECT_FALSE(torch::equal(model->parameters()[0], master.to(torch::kBFloat16)));
    }
  }
  expect_error([] { parse_precision("int8"); }, {"precision \"int8\""});
}

namespace {

// Five steps of two identical models, one with step() and one with queue_step() and the finish read
// one step late, as the Trainer does; step 2's gradient holds an inf, so that update is skipped.
void expect_queued_steps_equal_steps(torch::Device device, Precision precision) {
  torch::manual_seed(4);
  torch::nn::Linear a(8, 8);
  torch::nn::Linear b(std::dynamic_pointer_cast<torch::nn::LinearImpl>(a->clone()));
  a->to(device);
  b->to(device);
  OptimizerOptions o;
  o.precision = precision;
  o.schedule.lr = 1e-2;
  MixedPrecisionOptimizer opt_a(*a, o), opt_b(*b, o);
  std::vector<StepInfo> queued;
  for (int step = 0; step < 5; ++step) {
    const auto x = torch::randn({4, 8}).to(device);
    for (auto* m : {&a, &b}) {
      (*m)->forward(x.to((*m)->weight.scalar_type())).square().sum().backward();
      if (step == 2) (*m)->bias.mutable_grad().fill_(INFINITY);
    }
    const StepInfo want = opt_a.step(step);
    if (opt_b.step_queued()) queued.push_back(opt_b.finish_step());
    opt_b.queue_step(step);
    EXPECT_FALSE(b->weight.grad().defined()) << "queue_step zeroes the gradients";
    EXPECT_EQ(want.skipped, step == 2) << step;
    if (step == 4) queued.push_back(opt_b.finish_step());
  }
  ASSERT_EQ(queued.size(), 5u);
  EXPECT_TRUE(queued[2].skipped);
  EXPECT_FALSE(opt_b.step_queued());
  for (int step = 0; step < 5; ++step) EXPECT_EQ(queued[step].skipped, step == 2) << step;
  EXPECT_TRUE(torch::equal(a->weight, b->weight));
  EXPECT_TRUE(torch::equal(a->bias, b->bias));
  for (const auto& [key, st] : opt_b.adamw().state())  // four updates counted, not five
    EXPECT_EQ(static_cast<torch::optim::AdamWParamState&>(*st).step(), 4);
}

}  // namespace

TEST(Optimizer, QueuedStepsFinishedLateEqualSteps) { expect_queued_steps_equal_steps(torch::kCPU, Precision::kFP32); }

TEST(Optimizer, QueuedStepsFinishedLateEqualSteps_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  expect_queued_steps_equal_steps(torch::kCUDA, Precision::kFP32);
  expect_queued_steps_equal_steps(torch::kCUDA, Precision::kBF16Master);
}
