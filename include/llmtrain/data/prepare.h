// Text to token shards: the engine of build/bin/prepare_data. Documents are whole text files (or the
// parts of them between separator lines) or the lines of JSONL files; each is tokenized (on all cores) and followed by
// the tokenizer's end-of-text id; the tokens go to train or val shards of at most shard_tokens each, in input order.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::data {

/// What prepare_shards reads and writes.
struct PrepareOptions {
  std::vector<std::string> inputs;     // text files, JSONL files (*.jsonl) or folders of them
  std::string out_dir;                 // gets train_NNNNNN.bin and val_NNNNNN.bin
  std::vector<std::string> val_files;  // documents from these files go to val
  double val_fraction = 0.0;           // or: this share of documents, picked by a seeded hash
  uint64_t seed = 1337;                // for val_fraction
  std::string text_field = "text";     // JSONL field holding a document
  std::string separator;               // text files: a line equal to this ends a document ("%" for
                                       // fortune files); empty: each file is one document
  int64_t shard_tokens = 100'000'000;  // most tokens per shard
  int threads = 0;                     // 0: every core
  bool skip_bad_lines = false;         // JSONL: skip (and count) malformed lines instead of failing
  bool force = false;                  // replace an existing out_dir that llmtrain did not write
  bool add_bos = false;                // start each document with the tokenizer's bos, as the Llama family's
                                       // inputs start (an error when the tokenizer has none)
  std::function<void(int64_t done_bytes, int64_t total_bytes)> on_progress;  // optional
};

/// What prepare_shards did.
struct PrepareSummary {
  int64_t train_documents = 0, val_documents = 0;
  int64_t train_tokens = 0, val_tokens = 0;  // bos and end-of-text ids included
  int64_t train_shards = 0, val_shards = 0;
  int64_t skipped_lines = 0;
  int64_t bytes = 0;
  double seconds = 0;
};

/// Tokenizes the inputs into shards, and lists them in out_dir/manifest.json (which the loaders check
/// the shards they read against). The whole set is written into a folder beside out_dir and swapped in
/// (fs::write_dir_atomic): a failed run leaves the earlier output as it was, and no shard of an earlier
/// run survives beside the new ones. Throws llmtrain::Error naming the file (and JSONL line) for
/// missing or unreadable inputs, malformed lines (unless skip_bad_lines), text that is not UTF-8,
/// an empty corpus, and an out_dir that fs::check_output refuses or that lies inside an input folder.
///   auto summary = llmtrain::data::prepare_shards(*tok, {.inputs = {"corpus/"}, .out_dir = "shards"});
PrepareSummary prepare_shards(const tokenizer::Tokenizer& tok, const PrepareOptions& options);

}  // namespace llmtrain::data
