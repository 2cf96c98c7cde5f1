// train_gpt2: trains GPT-2 as a JSON config says, with checkpoints that resume exactly.
//   build/bin/train_gpt2 --config examples/configs/sotu_gpt2_124m.json [--set train.max_steps=50]... [--resume]
#include <CLI/CLI.hpp>
#include <llmtrain/llmtrain.h>

#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"Train GPT-2 from a JSON config"};
  std::string config_path;
  std::vector<std::string> sets;
  bool resume = false;
  app.add_option("--config", config_path, "JSON config (see examples/configs/)")->required();
  app.add_option("--set", sets, "override a key, e.g. --set train.lr=3e-4 (repeatable)");
  app.add_flag("--resume", resume, "continue from the newest complete checkpoint in out_dir");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto cfg = llmtrain::train::TrainerConfig::load(config_path, sets);
    const bool used = llmtrain::fs::exists(cfg.out_dir + "/checkpoints") || llmtrain::fs::exists(cfg.out_dir + "/metrics.jsonl");
    LLMTRAIN_CHECK(resume || !used, "out_dir ", cfg.out_dir,
                   " already holds a run; pass --resume to continue it, or choose another out_dir");
    llmtrain::train::Trainer trainer(cfg);
    if (resume && !trainer.resume_if_possible()) std::printf("no checkpoint in %s: starting from step 0\n", cfg.out_dir.c_str());
    const auto& m = trainer.model()->cfg;
    std::printf("GPT-2 %lld layers x %lld wide, %.1fM parameters; %lld tokens per step (%lld micro-steps); out_dir %s\n",
                static_cast<long long>(m.n_layer()), static_cast<long long>(m.n_embd()),
                trainer.model()->num_parameters() / 1e6,
                static_cast<long long>(trainer.grad_accum_steps() * cfg.train.batch_size * cfg.train.seq_len),
                static_cast<long long>(trainer.grad_accum_steps()), cfg.out_dir.c_str());
    const int64_t step = trainer.run();
    std::printf("done at step %lld; metrics in %s/metrics.jsonl\n", static_cast<long long>(step), cfg.out_dir.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_gpt2: %s\n", e.what());
    return 1;
  }
  return 0;
}
