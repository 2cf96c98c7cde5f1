// prepare_data: text files, folders or JSONL into train/val token shards (llm.c's format).
//   build/bin/prepare_data --tokenizer gpt2 --vocab-dir $LLMTRAIN_DATA_DIR/gpt2 --out data/sotu --val-files
//   ../shared/data/sotu/201*.txt -- ../shared/data/sotu
#include <llmtrain/text.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"Tokenize text into train/val token shards, documents separated by end-of-text"};
  llmtrain_cli::setup(
      app, "prepare_data --tokenizer gpt2 --vocab-dir $LLMTRAIN_DATA_DIR/gpt2 --out data/sotu ../shared/data/sotu");
  llmtrain::data::PrepareOptions o;
  std::string kind = "gpt2", vocab_dir, model;
  app.add_option("inputs", o.inputs, "text files, JSONL files (*.jsonl) or folders of them");
  app.add_option("--tokenizer", kind, "gpt2, sentencepiece or hf (a Hugging Face tokenizer.json)")
      ->capture_default_str()
      ->check(CLI::IsMember({"gpt2", "sentencepiece", "hf"}));
  app.add_option("--vocab-dir", vocab_dir, "GPT-2 files (default: $LLMTRAIN_GPT2_DIR, else $LLMTRAIN_DATA_DIR/gpt2)");
  app.add_option("--model", model, "sentencepiece: the .model file; hf: the folder holding tokenizer.json");
  app.add_flag("--bos", o.add_bos,
               "start each document with the tokenizer's bos (<|begin_of_text|>, <s>), as the Llama family's "
               "inputs start");
  app.add_option("--out", o.out_dir, "folder for train_NNNNNN.bin and val_NNNNNN.bin")->required();
  auto* frac = app.add_option("--val-fraction", o.val_fraction, "share of documents for val, picked by a seeded hash");
  app.add_option("--val-files", o.val_files, "files (or folders) whose documents go to val")->excludes(frac);
  app.add_option("--seed", o.seed, "seed of the val-fraction pick")->capture_default_str();
  app.add_option("--text-field", o.text_field, "JSONL field holding the text")->capture_default_str();
  app.add_option("--doc-separator", o.separator, "in text files, a line equal to this ends a document (e.g. %)");
  app.add_option("--shard-tokens", o.shard_tokens, "most tokens per shard")->capture_default_str();
  app.add_option("--threads", o.threads, "tokenizing threads (0: every core)")->capture_default_str();
  app.add_flag("--skip-bad-lines", o.skip_bad_lines, "skip and count malformed JSONL lines instead of failing");
  CLI11_PARSE(app, argc, argv);

  const bool tty = ::isatty(STDERR_FILENO);
  int last_decile = -1;
  o.on_progress = [&](int64_t done, int64_t total) {
    const double f = total > 0 ? double(done) / total : 1.0;
    if (tty) {
      const int filled = int(f * 40);
      std::fprintf(stderr, "\r[%s%s] %5.1f%% of %.1f MB", std::string(filled, '#').c_str(),
                   std::string(40 - filled, '.').c_str(), 100 * f, total / 1e6);
    } else if (int(f * 10) > last_decile) {
      last_decile = int(f * 10);
      std::fprintf(stderr, "prepare_data: %.0f%% of %.1f MB\n", 100 * f, total / 1e6);
    }
  };
  try {
    const auto tok = llmtrain::tokenizer::load_tokenizer(kind, kind == "gpt2" ? vocab_dir : model);
    const auto s = llmtrain::data::prepare_shards(*tok, o);
    if (tty) std::fprintf(stderr, "\n");
    std::printf("documents: %lld train, %lld val%s\n", static_cast<long long>(s.train_documents),
                static_cast<long long>(s.val_documents),
                s.skipped_lines ? (", " + std::to_string(s.skipped_lines) + " bad lines skipped").c_str() : "");
    std::printf("tokens:    %lld train in %lld shard(s), %lld val in %lld shard(s)\n",
                static_cast<long long>(s.train_tokens), static_cast<long long>(s.train_shards),
                static_cast<long long>(s.val_tokens), static_cast<long long>(s.val_shards));
    std::printf("text:      %.1f MB in %.2f s, %.1f MB/s, into %s\n", s.bytes / 1e6, s.seconds,
                s.bytes / 1e6 / s.seconds, o.out_dir.c_str());
  } catch (const std::exception& e) {
    if (tty) std::fprintf(stderr, "\n");
    std::fprintf(stderr, "prepare_data: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
  return 0;
}
