// bench_train: training steps of a model preset on the GPU (GPT-2 124M unless --model names another,
// e.g. llama-3.2-1b), llmtrain's fused path against plain LibTorch and, with --hf, transformers in the
// same run. Each row builds the model and the optimizer afresh, runs warm-up steps, then times
// `--steps` whole optimizer steps (forward, backward, clipping, AdamW, the logged loss read back) on
// random tokens. Rows:
//   libtorch        bf16 autocast over fp32 parameters, every op on its ATen path (kernels off); the
//                   loss read after each step, as a plain LibTorch loop does
//   libtorch-bf16w  bf16 parameters with fp32 master weights, ATen paths (kernels off)
//   llmtrain        bf16 parameters with fp32 master weights, llmtrain's CUDA kernels on, and the
//                   Trainer's order: each step's forward and backward replayed as a CUDA graph
//                   (train::GraphedStep), its loss and norm read once the next step's work is queued
//   llmtrain-eager  the same without the graph: the forward and backward launched op by op (--eager)
//   llmtrain-sync   eager, reading each step's loss before queueing the next (--sync)
//   llmtrain-fp8    llmtrain with every linear layer but the head in fp8 (train.fp8; --fp8), as a graph and
//                   eagerly (llmtrain-fp8-eager)
//   llmtrain-recompute-MODE  eager with activation recompute (--recompute mlp|block): its peak GiB and
//                   ms/step against llmtrain-eager's (which --recompute adds) are what it saves and costs
//   llmtrain-dp1    eager, through dist::DataParallel over an NCCL communicator of one rank (--dp): the
//                   data-parallel wrapper's cost at world size 1, against llmtrain-eager (which --dp adds)
//   llmtrain-OP     llmtrain with one op on ATen (--without OP): what that op's kernel is worth
//   llmtrain+OP     llmtrain with an op's kernel that is off by default turned on (--with OP)
//   hf-eager        transformers' model of the same shape (hf_train_speed.py; --hf): bf16 autocast over fp32
//                   parameters, SDPA attention, fused AdamW, the loss read after each step
//   hf-compile      the same under torch.compile
//   build/bin/bench_train --batch 16 --batch 32 --steps 20 [--eager] [--sync] [--dp] [--without layer_norm] [--with
//   mlp]
//   build/bin/bench_train --model llama-3.2-1b --seq 2048 --batch 4 --hf
#include <llmtrain/llmtrain.h>
#include <torch/cuda.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "peer.h"
#include "train_rows.h"

int main(int argc, char** argv) {
  CLI::App app{"Training steps of a model preset: llmtrain's fused path against plain LibTorch and transformers"};
  llmtrain_cli::setup(app, "bench_train --steps 15 --warmup 3");
  std::vector<int64_t> batches;
  int64_t T = 1024;
  int steps = 20, warmup = 5;
  double peak_tflops = 989.4;
  std::string model_name = "gpt2", python = LLMTRAIN_PYTHON;
  bool hf = false;
  app.add_option("--model", model_name, "a preset of either family (gpt2, llama-3.2-1b, ...; nn::ModelSpec::preset)")
      ->capture_default_str();
  app.add_flag("--hf", hf, "also run transformers' model of the same shape, eager and under torch.compile");
  app.add_option("--python", python, "Python with torch and transformers (default: the one CMake found)")
      ->capture_default_str();
  app.add_option("--batch", batches, "batch sizes (repeatable; default 16 and 32)");
  app.add_option("--seq", T, "sequence length")->capture_default_str();
  app.add_option("--steps", steps, "timed steps per row")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--peak-tflops", peak_tflops, "the GPU's dense bf16 peak, for MFU (H100/H200: 989.4)")
      ->capture_default_str();
  std::vector<std::string> paths;
  app.add_option("--path", paths, "rows to run (repeatable: libtorch, libtorch-bf16w, llmtrain; default all)");
  std::vector<std::string> without, with;
  app.add_option("--without", without, "also run llmtrain with this op on ATen (repeatable; see ops/dispatch.h)");
  app.add_option("--with", with, "also run llmtrain with this default-off op's kernel on (repeatable)");
  bool sync_row = false, eager_row = false, dp_row = false;
  app.add_flag("--sync", sync_row,
               "also run llmtrain eagerly, reading each step's loss and norm before the next is queued");
  app.add_flag("--eager", eager_row, "also run llmtrain without the CUDA graph");
  bool fp8_row = false;
  app.add_flag("--fp8", fp8_row, "also run llmtrain with fp8 linear layers (train.fp8), with and without the graph");
  std::vector<std::string> recompute;
  app.add_option("--recompute", recompute,
                 "also run llmtrain eagerly with this activation recompute (repeatable: mlp, block), beside the eager "
                 "row without: the memory it saves and the time it costs")
      ->check(CLI::IsMember({"mlp", "block"}));
  app.add_flag("--dp", dp_row,
               "also run llmtrain eagerly through DataParallel over NCCL at world size 1, plain and with ZeRO-1 "
               "(and eagerly without)");
  CLI11_PARSE(app, argc, argv);
  if (batches.empty()) batches = {16, 32};
  bench::default_ops();  // before any row switches kernels
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_train: needs a CUDA device\n");
    return 1;
  }
  using bench::Variant;
  using llmtrain::optim::Precision;
  std::vector<bench::Row> rows;
  try {
    const auto wanted = [&](const std::string& p) { return bench::wanted(paths, p); };
    const double peak = peak_tflops * 1e12;
    const auto spec = llmtrain::nn::ModelSpec::preset(model_name);
    LLMTRAIN_CHECK(T <= spec.block_size(), "--seq ", T, " is longer than ", model_name, "'s block_size ",
                   spec.block_size());
    for (int64_t B : batches) {
      const auto keep = [&](const bench::Row& r) {
        rows.push_back(r);
        bench::print_finished(model_name, r);
      };
      const auto add = [&](const Variant& v) { keep(bench::run(v, spec, B, T, steps, warmup, peak)); };
      if (wanted("libtorch")) add({"libtorch", false, Precision::kBF16, /*sync=*/true});
      if (wanted("libtorch-bf16w")) add({"libtorch-bf16w", false, Precision::kBF16Master, /*sync=*/true});
      if (wanted("llmtrain")) add({"llmtrain", true, Precision::kBF16Master, false, /*graph=*/true});
      if (eager_row || dp_row || !recompute.empty()) add({"llmtrain-eager", true, Precision::kBF16Master});
      for (const auto& mode : recompute) {  // eager, as the Trainer runs recompute
        Variant v{"llmtrain-recompute-" + mode, true, Precision::kBF16Master};
        v.recompute = llmtrain::Choice<llmtrain::nn::Recompute>::parse(mode, "--recompute");
        add(v);
      }
      if (dp_row) {
        Variant v{"llmtrain-dp1", true, Precision::kBF16Master};
        v.dp = true;
        add(v);
        v.name = "llmtrain-zero1";
        v.zero = true;
        add(v);
      }
      if (fp8_row) {
        Variant v{"llmtrain-fp8", true, Precision::kBF16Master, false, /*graph=*/true, "", "fp8"};
        v.fp8 = true;
        add(v);
        v.name = "llmtrain-fp8-eager";
        v.graph = false;
        add(v);
      }
      if (sync_row) add({"llmtrain-sync", true, Precision::kBF16Master, /*sync=*/true});
      for (const auto& op : without) add({"llmtrain-" + op, true, Precision::kBF16Master, false, true, op});
      for (const auto& op : with) add({"llmtrain+" + op, true, Precision::kBF16Master, false, true, "", op});
      if (hf) {  // the same shape in transformers, in a process of its own (its memory is its own)
        const double flops = double(spec.flops_per_token(T));
        const auto j = bench::run_python_json(
            python, std::string(LLMTRAIN_SOURCE_DIR) + "/benchmarks/hf_train_speed.py",
            {model_name, std::to_string(B), std::to_string(T), std::to_string(steps), std::to_string(warmup)});
        for (const char* mode : {"eager", "compile"}) {
          const auto& h = j.at(mode);
          const double sec = h.at("seconds_per_step").get<double>();
          keep({std::string("hf-") + mode, B, sec * 1e3, double(B * T) / sec,
                peak > 0 ? double(B * T) / sec * flops / peak : 0, h.at("peak_gib").get<double>(),
                h.at("loss").get<double>()});
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_train: %s\n", e.what());
    return 1;
  }
  std::printf("%s, T=%lld\n", model_name.c_str(), static_cast<long long>(T));
  std::printf("%-24s %5s %10s %12s %7s %9s %9s %8s\n", "path", "B", "ms/step", "tok/s", "MFU", "peak GiB", "loss",
              "speedup");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    double base = 0;
    for (const auto& b : rows)
      if (b.batch == r.batch && b.name == "libtorch") base = b.tokens_per_s;
    const double speedup = base > 0 ? r.tokens_per_s / base : 0;
    std::printf("%-24s %5lld %10.2f %12.0f %6.1f%% %9.2f %9.4f %7.2fx\n", r.name.c_str(),
                static_cast<long long>(r.batch), r.ms_per_step, r.tokens_per_s, 100 * r.mfu, r.peak_gib, r.loss,
                speedup);
    out.push_back({{"model", model_name},
                   {"path", r.name},
                   {"batch", r.batch},
                   {"seq", T},
                   {"ms_per_step", r.ms_per_step},
                   {"tokens_per_s", r.tokens_per_s},
                   {"mfu", r.mfu},
                   {"peak_gib", r.peak_gib},
                   {"speedup_vs_libtorch", speedup}});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
