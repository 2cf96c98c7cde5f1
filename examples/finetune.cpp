// finetune: continues training a checkpoint's model on new data: token shards, or prompt/completion
// JSONL (SFT, the loss on completions only). The model and tokenizer come from the checkpoint (its own
// copy of the tokenizer; a Hugging Face folder's tokenizer files); the config file says the rest (data,
// train, eval, ...), as for train.
//   build/bin/finetune --from runs/base --config examples/configs/finetune_sft.json --set data.train=train.jsonl
//   --set data.val=val.jsonl [--resume]
#include <llmtrain/llmtrain.h>
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"Fine-tune a checkpoint or Hugging Face folder (GPT-2, Llama, Mistral, Qwen2) on shards or SFT JSONL"};
  llmtrain_cli::setup(app,
                      "finetune --from runs/demo/model --config examples/configs/finetune_sft.json --set "
                      "data.train=sft/train.jsonl");
  std::string from, config_path;
  std::vector<std::string> sets;
  llmtrain::train::RunOptions run;
  app.add_option("--from,--init", from,
                 "checkpoint folder, a run's out_dir (newest checkpoint), or a Hugging Face folder of any family")
      ->required();
  app.add_option("--config", config_path, "JSON config of the fine-tuning run (see examples/configs/)")->required();
  app.add_option("--set", sets, "override a key, e.g. --set train.lr=1e-5 (repeatable)");
  app.add_flag("--resume", run.resume, "continue the fine-tuning run from the newest checkpoint in its out_dir");
  app.add_flag("--force", run.force,
               "write into an out_dir that holds files llmtrain did not write (config.json, ...)");
  bool quiet = false;
  app.add_flag("--quiet", quiet, "no progress line or samples (train.quiet)");
  CLI11_PARSE(app, argc, argv);
  if (quiet) sets.push_back("train.quiet=true");
  try {
    llmtrain::train::run_training(llmtrain::train::finetune_config(from, config_path, sets), run);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "finetune: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
  return 0;
}
