// evaluate: scores a model on a task whose data the user gives (eval/tasks.h says how each is scored):
//   build/bin/evaluate --checkpoint runs/sotu_gpt2_124m --task hellaswag --data hellaswag_val.jsonl
//   build/bin/evaluate --checkpoint Llama-3.2-1B --task choice --data mine.jsonl --limit 500
//   build/bin/evaluate --checkpoint gpt2_124M.bin --task perplexity --data wiki.test.txt --stride 512
// Any checkpoint, Hugging Face folder (GPT-2, Llama, Mistral, Qwen2) or llm.c file; --adapter merges a
// PEFT LoRA adapter first. A progress bar goes to stderr, then the scores with their standard errors;
// stdout gets one JSON line: {"task", "name", each score and its "<score>_stderr", the counts, "seconds"}.
#include <llmtrain/core/error.h>
#include <llmtrain/eval/tasks.h>
#include <llmtrain/nn/causal_lm.h>
#include <llmtrain/peft/lora.h>
#include <llmtrain/train/config.h>
#include <llmtrain/train/model_files.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>

#include "cli.h"
#include "loaded_model.h"

int main(int argc, char** argv) {
  CLI::App app{"Score a checkpoint or Hugging Face folder on multiple choice (HellaSwag, your own) or perplexity"};
  llmtrain_cli::setup(app, "evaluate --checkpoint runs/demo/model --task hellaswag --data hellaswag_val.jsonl");
  llmtrain::eval::TaskConfig t;
  std::string checkpoint, adapter, vocab_dir, tokenizer, model_file, device = "auto", dtype = "auto";
  app.add_option("--checkpoint", checkpoint,
                 "checkpoint folder, a run's out_dir (newest checkpoint), a Hugging Face folder or an llm.c .bin")
      ->required();
  app.add_option("--task", t.task,
                 "hellaswag (JSONL: ctx, endings, label), choice (JSONL: context, choices, label) or perplexity")
      ->required()
      ->check(CLI::IsMember({"hellaswag", "choice", "perplexity"}));
  app.add_option("--data", t.data, "the task's JSONL file; perplexity: text files or .bin token shards")->required();
  app.add_option("--limit", t.limit, "the first N examples (0: all)")->capture_default_str();
  app.add_option("--batch", t.batch, "examples (all of each one's choices) or windows per forward (0: 16)")
      ->capture_default_str();
  app.add_option("--window", t.window, "perplexity: ids per window (0: the model's block size)")->capture_default_str();
  app.add_option("--stride", t.stride, "perplexity: ids between windows (0: half the window)")->capture_default_str();
  app.add_flag("--skip-bad-lines", t.skip_bad, "count and skip malformed lines and bad labels instead of failing");
  app.add_option("--adapter", adapter, "a PEFT LoRA adapter folder, merged into the model first");
  app.add_option("--tokenizer", tokenizer, "gpt2 or sentencepiece (default: the model's own, else gpt2)")
      ->check(CLI::IsMember({"gpt2", "sentencepiece"}));
  app.add_option("--vocab-dir", vocab_dir, "GPT-2 files (default: $LLMTRAIN_GPT2_DIR, else $LLMTRAIN_DATA_DIR/gpt2)");
  app.add_option("--model", model_file, "SentencePiece .model file");
  llmtrain_cli::add_device_options(app, device, dtype);
  CLI11_PARSE(app, argc, argv);
  try {
    const auto model = llmtrain_cli::load_model_on(checkpoint, adapter, device, dtype);
    const auto tok = llmtrain_cli::model_tokenizer(checkpoint, tokenizer, vocab_dir, model_file).tok;
    const llmtrain::eval::Task task(t, *tok, llmtrain::train::input_bos(model->spec(), *tok), model->block_size());

    const auto t0 = std::chrono::steady_clock::now();
    const auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
    // A terminal gets a bar redrawn in place; a log a line at each tenth.
    const bool tty = ::isatty(2);
    int64_t told = -1;
    const auto progress = [&](int64_t done, int64_t total) {
      const int64_t tenth = 10 * done / total;
      if (!tty && tenth == told) return;
      told = tenth;
      const int width = 30, filled = int(width * done / total);
      std::fprintf(stderr, "%s%s [%.*s%*s] %lld/%lld %.1f s%s", tty ? "\r" : "", t.task.c_str(), filled,
                   "##############################", width - filled, "", static_cast<long long>(done),
                   static_cast<long long>(total), seconds(), tty ? "" : "\n");
    };
    const auto tally = task.run(*model, 0, 1, progress);
    const auto result = task.result(tally, seconds());
    if (tty) std::fputs("\n", stderr);
    std::fprintf(stderr, "%s\n", result.line().c_str());
    std::printf("%s\n", result.json().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "evaluate: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
  return 0;
}
