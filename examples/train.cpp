// train: trains a model (GPT-2, Llama, Mistral, Qwen2: model.preset or model.config) as a JSON config says, with
// checkpoints that resume exactly.
//   build/bin/train --config examples/configs/sotu_gpt2_124m.json [--set train.max_steps=50]... [--resume]
#include <llmtrain/llmtrain.h>
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"Train a GPT-2 or Llama-family model from a JSON config"};
  llmtrain_cli::setup(app, "train --config examples/configs/demo_cpu.json --set train.max_steps=100");
  std::string config_path;
  std::vector<std::string> sets;
  llmtrain::train::RunOptions run;
  auto* config = app.add_option("--config", config_path, "JSON config (docs/CONFIG.md lists every key)");
  app.add_option("--set", sets, "override a key, e.g. --set train.lr=3e-4 (repeatable)");
  app.add_flag("--resume", run.resume, "continue from the newest complete checkpoint in out_dir");
  app.add_flag("--force", run.force,
               "write into an out_dir that holds files llmtrain did not write (config.json, ...)");
  bool print = false, reference = false, quiet = false;
  app.add_flag("--print-config", print,
               "print the full config (every key; defaults where --config and --set say "
               "nothing) and exit");
  app.add_flag("--print-reference", reference,
               "print every key with its type, default and meaning (Markdown) and exit");
  app.add_flag("--quiet", quiet, "no progress line or samples (train.quiet)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (reference) {
      std::printf("%s", llmtrain::train::TrainerConfig::reference().c_str());
      return 0;
    }
    if (quiet) sets.push_back("train.quiet=true");
    const auto cfg = config->count() ? llmtrain::train::TrainerConfig::load(config_path, sets)
                                     : llmtrain::train::TrainerConfig::parse("{}", "the defaults", sets);
    if (print) {
      std::printf("%s\n", cfg.to_json().c_str());
      return 0;
    }
    LLMTRAIN_CHECK(config->count(), "--config is required (train --print-config prints a full one to start from)");
    llmtrain::train::run_training(cfg, run);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
  return 0;
}
