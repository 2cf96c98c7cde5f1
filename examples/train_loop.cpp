// train_loop: GPT-2 trained by a loop written out, from llmtrain's parts (the model, the mixed-precision
// optimizer, the shard loader, the metrics logger, the checkpoint writer): what to copy and change when
// the Trainer's loop is not the one you want.
//   build/bin/train_loop --train "data/sotu/train_*.bin" --steps 50 --out runs/loop
#include <llmtrain/llmtrain.h>
#include <torch/cuda.h>
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"Train GPT-2 with a loop written out from llmtrain's parts"};
  llmtrain_cli::setup(app, "train_loop --train \"data/sotu/train_*.bin\" --steps 50 --out runs/loop");
  std::string train_glob, out = "runs/loop", preset = "tiny";
  int64_t steps = 50, batch = 8, seq = 64;
  double lr = 1e-3;
  app.add_option("--train", train_glob, "glob of token shards (prepare_data)")->required();
  app.add_option("--out", out, "folder for metrics.jsonl, loss.svg and the model")->capture_default_str();
  app.add_option("--preset", preset, "GPT-2 shape: tiny, gpt2, ...")->capture_default_str();
  app.add_option("--steps", steps, "optimizer steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch", batch, "windows per step")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "tokens per window")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--lr", lr, "peak learning rate (cosine to a tenth)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    namespace lt = llmtrain;
    const torch::Device device = torch::cuda::is_available() ? torch::kCUDA : torch::kCPU;
    torch::manual_seed(1337);
    lt::nn::GPT2 model(lt::nn::GPT2Config::preset(preset));
    model->to(device);
    lt::optim::OptimizerOptions oo;
    oo.schedule = {lt::optim::ScheduleKind::kCosine, lr, steps / 10, steps, 0.1};
    oo.precision = device.is_cuda() ? lt::optim::Precision::kBF16 : lt::optim::Precision::kFP32;
    lt::optim::MixedPrecisionOptimizer opt(*model, oo);
    lt::data::DataLoader loader({.pattern = train_glob,
                                 .batch_size = batch,
                                 .seq_len = seq,
                                 .vocab_size = model->cfg.vocab_size(),
                                 .device = device});
    lt::fs::check_output(out, {"--out", {train_glob}});  // never a folder llmtrain did not write
    lt::fs::make_dirs(out);
    if (!lt::fs::is_our_output(out)) lt::fs::mark_output(out, "run");
    lt::train::MetricsLogger log({.out_dir = out,
                                  .max_steps = steps,
                                  .step_tokens = batch * seq,
                                  .flops_per_token = model->flops_per_token(seq)});
    log.keep_through(0);  // a new run: the records of an earlier one in --out go
    model->train();
    for (int64_t step = 0; step < steps; ++step) {
      const lt::data::Batch b = loader.next();
      torch::Tensor loss;
      {
        lt::optim::AutocastScope amp(device.type(), oo.precision);  // bf16 matmuls on the GPU
        loss = model->loss(b.inputs, b.targets);
      }
      opt.scale_loss(loss).backward();
      const lt::optim::StepInfo info = opt.step(step);  // clip, AdamW, zero the gradients
      lt::train::StepRecord r{
          .step = step + 1, .loss = loss.item<double>(), .lr = info.lr, .grad_norm = info.grad_norm};
      log.step(r);  // metrics.jsonl, the progress line
    }
    log.write_loss_curves();
    lt::train::save_model_checkpoint(model.ptr(), out + "/model");  // generate --checkpoint reads it
    std::printf("trained %lld steps; the model is in %s/model\n", static_cast<long long>(steps), out.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_loop: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
  return 0;
}
