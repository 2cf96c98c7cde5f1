// train_gpt2: trains GPT-2 as a JSON config says, with checkpoints that resume exactly.
//   build/bin/train_gpt2 --config examples/configs/sotu_gpt2_124m.json [--set train.max_steps=50]... [--resume]
#include <CLI/CLI.hpp>
#include <llmtrain/llmtrain.h>

#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"Train GPT-2 from a JSON config"};
  std::string config_path;
  std::vector<std::string> sets;
  llmtrain::train::RunOptions run;
  app.add_option("--config", config_path, "JSON config (see examples/configs/)")->required();
  app.add_option("--set", sets, "override a key, e.g. --set train.lr=3e-4 (repeatable)");
  app.add_flag("--resume", run.resume, "continue from the newest complete checkpoint in out_dir");
  app.add_flag("--force", run.force, "write into an out_dir that holds files llmtrain did not write (config.json, ...)");
  CLI11_PARSE(app, argc, argv);
  try {
    llmtrain::train::run_training(llmtrain::train::TrainerConfig::load(config_path, sets), run);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt2: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
  return 0;
}
