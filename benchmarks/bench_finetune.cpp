// bench_finetune: fine-tuning steps of a model preset on the GPU (GPT-2 XL and the Llama-3.2-1B shape,
// random weights) at one batch, full, with LoRA and with QLoRA, against transformers + PEFT in the same run. Rows
// (bench/train_rows.h times each):
//   full        every parameter: bf16 parameters with fp32 masters and AdamW state, llmtrain's kernels,
//               each step's forward and backward as a CUDA graph (bench_train's llmtrain row)
//   lora        adapters of rank --r on --targets over the frozen bf16 base (no gradient, no optimizer
//               state for it), bf16 adapters with fp32 masters, the same kernels and graph
//   qlora       the same over the base in NF4 (every linear layer but the head): each weight
//               dequantized for its products in the forward and the backward
//   full-8bit   full, with AdamW's moments in 8 bits (train.optimizer_state 8bit)
//   hf-peft     transformers' model of the shape in bf16 with PEFT's LoRA of the same rank and targets
//               (its adapters in float32, as PEFT keeps them), bf16 autocast, fused AdamW over the
//               adapters, the loss read after each step (hf_peft_speed.py; --hf)
//   hf-qlora    the same over the base loaded in NF4 through bitsandbytes (double quantization, bf16
//               compute), as QLoRA loads it (--hf; bitsandbytes importable by --python)
//   build/bin/bench_finetune --model llama-3.2-1b --model gpt2-xl --seq 1024 --batch 4 --hf
#include <llmtrain/llmtrain.h>
#include <torch/cuda.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "peer.h"
#include "train_rows.h"

int main(int argc, char** argv) {
  CLI::App app{"Fine-tuning steps, full and LoRA, of model presets: llmtrain against transformers + PEFT"};
  llmtrain_cli::setup(app, "bench_finetune --model llama-3.2-1b --batch 4 --hf");
  std::vector<std::string> models;
  int64_t B = 4, T = 1024, r = 16;
  int steps = 10, warmup = 3;
  std::vector<std::string> targets;
  bool hf = false;
  std::vector<std::string> paths;
  std::string python = LLMTRAIN_PYTHON;
  app.add_option("--model", models, "presets (repeatable; default gpt2-xl and llama-3.2-1b)");
  app.add_option("--batch", B, "batch size of every row")->capture_default_str();
  app.add_option("--seq", T, "sequence length")->capture_default_str();
  app.add_option("--r", r, "LoRA's rank (lora_alpha 2r)")->capture_default_str();
  app.add_option("--targets", targets, "LoRA's target modules (repeatable; default all-linear)");
  app.add_option("--steps", steps, "timed steps per row")->capture_default_str();
  app.add_option("--warmup", warmup, "untimed steps first")->capture_default_str();
  app.add_option("--path", paths,
                 "rows to run (repeatable: full, lora, qlora, full-8bit, hf-peft, hf-qlora; default all; an hf row "
                 "implies --hf)")
      ->check(CLI::IsMember({"full", "lora", "qlora", "full-8bit", "hf-peft", "hf-qlora"}));
  app.add_flag("--hf", hf, "also run transformers + PEFT LoRA and QLoRA (PEFT, bitsandbytes importable by --python)");
  app.add_option("--python", python, "Python with torch, transformers and peft (default: the one CMake found)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (models.empty()) models = {"gpt2-xl", "llama-3.2-1b"};
  if (targets.empty()) targets = {"all-linear"};
  // Naming a transformers row asks for it.
  for (const auto& p : paths) hf = hf || p.rfind("hf-", 0) == 0;
  bench::default_ops();  // before any row switches kernels
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_finetune: needs a CUDA device\n");
    return 1;
  }
  struct Out {
    std::string model;
    bench::Row row;
  };
  std::vector<Out> rows;
  const auto add = [&](const std::string& model, const bench::Row& row) {
    rows.push_back({model, row});
    bench::print_finished(model, row);
  };
  try {
    for (const auto& name : models) {
      const auto spec = llmtrain::nn::ModelSpec::preset(name);
      LLMTRAIN_CHECK(T <= spec.block_size(), "--seq ", T, " is longer than ", name, "'s block_size ",
                     spec.block_size());
      llmtrain::peft::LoraConfig lora;
      lora.r = r;
      lora.lora_alpha = double(2 * r);
      if (targets.size() == 1 && targets[0] == "all-linear") lora.all_linear = true;
      else lora.target_modules = targets;
      const auto ours = [&](const bench::Variant& v) {
        if (bench::wanted(paths, v.name)) add(name, bench::run(v, spec, B, T, steps, warmup, 989.4e12));
      };
      bench::Variant full{"full", true, llmtrain::optim::Precision::kBF16Master, false, /*graph=*/true};
      ours(full);
      bench::Variant adapted = full;
      adapted.name = "lora";
      adapted.lora = lora;
      ours(adapted);
      bench::Variant qlora = adapted;
      qlora.name = "qlora";
      qlora.nf4 = true;
      ours(qlora);
      bench::Variant full8 = full;
      full8.name = "full-8bit";
      full8.state = llmtrain::optim::StateFormat::k8Bit;
      ours(full8);
      if (hf) {  // in processes of their own (their memory is their own)
        std::string target_list;
        for (const auto& t : targets) target_list += (target_list.empty() ? "" : ",") + t;
        const std::pair<std::string, std::string> baselines[] = {{"hf-peft", "bf16"}, {"hf-qlora", "nf4"}};
        for (const auto& [row, base] : baselines) {
          if (!bench::wanted(paths, row)) continue;
          try {  // a baseline that cannot run (no peft or bitsandbytes there) leaves the other rows standing
            const auto j =
                bench::run_python_json(python, std::string(LLMTRAIN_SOURCE_DIR) + "/benchmarks/hf_peft_speed.py",
                                       {name, std::to_string(B), std::to_string(T), std::to_string(steps),
                                        std::to_string(warmup), std::to_string(r), target_list, base});
            const double sec = j.at("seconds_per_step").get<double>();
            add(name, {row, B, sec * 1e3, double(B * T) / sec, 0, j.at("peak_gib").get<double>(),
                       j.at("loss").get<double>()});
          } catch (const std::exception& e) {
            std::fprintf(stderr, "bench_finetune: no %s row for %s: %s\n", row.c_str(), name.c_str(), e.what());
          }
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_finetune: %s\n", e.what());
    return 1;
  }
  std::printf("B=%lld, T=%lld, LoRA r=%lld\n", static_cast<long long>(B), static_cast<long long>(T),
              static_cast<long long>(r));
  std::printf("%-14s %-9s %10s %12s %7s %9s %9s %9s %9s %9s %9s\n", "model", "path", "ms/step", "tok/s", "MFU",
              "peak GiB", "loss", "vs peft", "vs qlora", "vs lora", "mem/full");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& o : rows) {
    double peft = 0, hf_qlora = 0, lora = 0, full_mem = 0;
    for (const auto& b : rows) {
      if (b.model != o.model) continue;
      if (b.row.name == "hf-peft") peft = b.row.tokens_per_s;
      if (b.row.name == "hf-qlora") hf_qlora = b.row.tokens_per_s;
      if (b.row.name == "lora") lora = b.row.tokens_per_s;
      if (b.row.name == "full") full_mem = b.row.peak_gib;
    }
    const auto& r2 = o.row;
    const double vs = peft > 0 ? r2.tokens_per_s / peft : 0, mem = full_mem > 0 ? r2.peak_gib / full_mem : 0,
                 vs_lora = lora > 0 ? r2.tokens_per_s / lora : 0,
                 vs_qlora = hf_qlora > 0 ? r2.tokens_per_s / hf_qlora : 0;
    std::printf("%-14s %-9s %10.2f %12.0f %6.1f%% %9.2f %9.4f %8.2fx %8.2fx %8.2fx %9.2f\n", o.model.c_str(),
                r2.name.c_str(), r2.ms_per_step, r2.tokens_per_s, 100 * r2.mfu, r2.peak_gib, r2.loss, vs, vs_qlora,
                vs_lora, mem);
    out.push_back({{"model", o.model},
                   {"path", r2.name},
                   {"batch", B},
                   {"seq", T},
                   {"ms_per_step", r2.ms_per_step},
                   {"tokens_per_s", r2.tokens_per_s},
                   {"peak_gib", r2.peak_gib},
                   {"vs_peft", vs},
                   {"vs_hf_qlora", vs_qlora},
                   {"vs_lora", vs_lora},
                   {"memory_vs_full", mem}});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
