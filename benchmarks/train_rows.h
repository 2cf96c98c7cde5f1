// What bench_train and bench_finetune share: one row's training steps on the GPU, timed. The row builds
// the model (random weights, seeded) and the optimizer afresh, optionally puts LoRA adapters on it (a
// frozen base), runs warm-up steps, then times whole optimizer steps (forward, backward, clipping,
// AdamW, the logged loss read back) on random tokens, and reads the allocator's peak.
#pragma once

#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_profiler_api.h>
#include <llmtrain/llmtrain.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace bench {

struct Row {
  std::string name;
  int64_t batch;
  double ms_per_step, tokens_per_s, mfu, peak_gib, loss;
};

// One line for a row as soon as it is measured, ahead of the table at the end: a run cut short (a time
// limit on the GPU machine) keeps what it measured.
inline void print_finished(const std::string& model, const Row& r) {
  std::printf("done: %s %s B=%lld: %.2f ms/step, %.0f tok/s, %.2f GiB peak\n", model.c_str(), r.name.c_str(),
              static_cast<long long>(r.batch), r.ms_per_step, r.tokens_per_s, r.peak_gib);
  std::fflush(stdout);
}

// Whether a --path list (empty: every row) names the row `name`.
inline bool wanted(const std::vector<std::string>& paths, const std::string& name) {
  return paths.empty() || std::find(paths.begin(), paths.end(), name) != paths.end();
}

// The ops whose kernels are on by default, read before any row changes them.
inline const std::vector<std::string>& default_ops() {
  static const std::vector<std::string> on = [] {
    std::vector<std::string> v;
    for (const auto& op : llmtrain::ops::cuda_kernel_names())
      if (llmtrain::ops::cuda_kernel_enabled(op)) v.push_back(op);
    return v;
  }();
  return on;
}

// How a row trains.
struct Variant {
  std::string name;
  bool kernels = true;  // llmtrain's CUDA kernels (false: every op on ATen)
  llmtrain::optim::Precision precision = llmtrain::optim::Precision::kBF16Master;
  bool sync = false;                               // read each step's loss before queueing the next
  bool graph = false;                              // the forward and backward as a CUDA graph
  std::string without, with;                       // one op off, or one default-off op on
  bool dp = false;                                 // through DataParallel over a one-rank NcclCommunicator
  bool zero = false;                               // and ZeRO-1 (its one shard: every parameter)
  std::optional<llmtrain::peft::LoraConfig> lora;  // adapters on a frozen base
  bool nf4 = false;                                // that base in NF4 (QLoRA)
  llmtrain::optim::StateFormat state = llmtrain::optim::StateFormat::kFP32;  // AdamW's moments
  llmtrain::nn::Recompute recompute = llmtrain::nn::Recompute::kNone;        // activations recomputed in backward
  bool fp8 = false;  // linear layers' products in fp8 (train.fp8's defaults: history 16, margin 0, the head skipped);
                     // their CUDA path is the default-off op "fp8", so such a row sets `with` too
};

inline Row run(const Variant& v, const llmtrain::nn::ModelSpec& spec, int64_t B, int64_t T, int steps, int warmup,
               double peak_flops) {
  llmtrain::ops::set_cuda_kernels_enabled(v.kernels);
  for (const auto& op : llmtrain::ops::cuda_kernel_names()) {
    const bool on = std::find(default_ops().begin(), default_ops().end(), op) != default_ops().end();
    llmtrain::ops::set_cuda_kernel_enabled(op, (on && op != v.without) || op == v.with);
  }
  torch::manual_seed(1337);
  const auto model = llmtrain::nn::make_model(spec);
  model->set_recompute(v.recompute);
  if (v.lora) llmtrain::peft::add_lora(*model, *v.lora);
  model->module().to(torch::kCUDA);
  if (v.nf4) llmtrain::peft::quantize_base(*model);
  llmtrain::optim::OptimizerOptions o;
  o.schedule.lr = 6e-4;
  o.state = v.state;
  o.precision = v.precision;
  o.stochastic_rounding = v.kernels;  // the plain LibTorch rows round their bf16 copies to nearest
  llmtrain::optim::MixedPrecisionOptimizer opt(model->module(), o);
  if (v.fp8) llmtrain::nn::enable_fp8(model->module(), 16, {"lm_head"});  // after the cast to bf16, as the Trainer
  const auto idx =
      torch::randint(spec.vocab_size(), {B, T + 1}, torch::TensorOptions().dtype(torch::kLong).device(torch::kCUDA));
  const auto inputs = idx.narrow(1, 0, T).contiguous(), targets = idx.narrow(1, 1, T).contiguous();
  const auto micro_step = [&](const torch::Tensor& x, const torch::Tensor& y) {
    torch::Tensor l;
    {
      llmtrain::optim::AutocastScope amp(torch::kCUDA, v.precision);
      l = model->loss(x, y, {});
    }
    l.backward();
    return l.detach();
  };
  std::unique_ptr<llmtrain::dist::DataParallel> dp;
  if (v.dp) {
    const auto comm = llmtrain::dist::NcclCommunicator::create(nullptr, torch::Device(torch::kCUDA, 0));
    llmtrain::dist::DataParallelOptions dpo;
    dpo.shard_optimizer = v.zero;
    dp = std::make_unique<llmtrain::dist::DataParallel>(model->module().parameters(), comm, dpo);
    if (v.zero) llmtrain::train::shard_optimizer(opt, *dp, comm);
  }
  std::unique_ptr<llmtrain::train::GraphedStep> graph;
  if (v.graph) graph = std::make_unique<llmtrain::train::GraphedStep>(model->module().parameters(), micro_step);
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::resetPeakStats(0);
  double loss = 0;
  llmtrain::HostCopy pending_loss;
  const auto step = [&](int64_t s) {
    if (dp) dp->zero_grad();
    const torch::Tensor l = graph ? graph->run(inputs, targets, /*first=*/true) : micro_step(inputs, targets);
    if (dp) dp->finish();
    if (!v.sync) {  // as the Trainer: the previous step's loss and norm, read once this step's work is queued
      if (pending_loss.defined()) loss = pending_loss.get().item<double>();
      model->check_inputs(/*wait=*/false);
      opt.queue_step(s);
      if (v.fp8) llmtrain::nn::update_fp8_scales(model->module(), 0);
      pending_loss = llmtrain::HostCopy(l);
      return;
    }
    opt.step(s);
    if (v.fp8) llmtrain::nn::update_fp8_scales(model->module(), 0);
    loss = l.item<double>();  // read before the next step is queued: the device waits for the host
    model->check_inputs(/*wait=*/true);
  };
  for (int s = 0; s < warmup; ++s) step(s);
  torch::cuda::synchronize();
  cudaProfilerStart();  // profilers started with --profile-from-start off see the timed steps alone
  const auto t0 = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) step(warmup + s);
  torch::cuda::synchronize();
  cudaProfilerStop();
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(0);
  Row r;
  r.name = v.name;
  r.batch = B;
  r.ms_per_step = sec * 1e3;
  r.tokens_per_s = double(B * T) / sec;
  // MFU of full training alone: a frozen base skips its weight gradients, which 6N counts.
  r.mfu = peak_flops > 0 && !v.lora ? r.tokens_per_s * model->flops_per_token(T) / peak_flops : 0;
  r.peak_gib = double(stats.allocated_bytes[size_t(c10::CachingAllocator::StatType::AGGREGATE)].peak) / (1 << 30);
  r.loss = loss;
  return r;
}

}  // namespace bench
