// Supervised fine-tuning data: JSONL lines {"prompt": ..., "completion": ...} or {"text": ...} become
// (T) windows whose targets are -100 wherever the loss must not look: on prompt tokens and padding.
// An example is prompt + completion + end-of-text, and the loss covers the completion and the
// end-of-text. Without packing each example fills one window (padded); with packing, whole examples
// are laid one after another into windows (an example is never split; attention is not masked between
// examples of one window, whose end-of-text tokens separate them).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmtrain/data/dataloader.h"
#include "llmtrain/data/sft_options.h"
#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::data {

/// Tokenized, masked SFT windows, and seeded, rank-sharded, resumable batches of them.
///   llmtrain::data::SFTDataset sft(*tok, {.path = "train.jsonl", .seq_len = 512});
///   auto batch = sft.batch({0, 1, 2, 3});  // inputs, targets (4, 512); targets -100 off the completion
class SFTDataset {
 public:
  /// Throws llmtrain::Error naming file:line for malformed lines (unless skip_bad_lines), and when no
  /// example has a completion token within seq_len.
  SFTDataset(const tokenizer::Tokenizer& tok, SFTOptions options);

  int64_t size() const { return int64_t(inputs_.size()); }  // windows
  /// Windows `indices` as a batch (B, T).
  Batch batch(const std::vector<int64_t>& indices) const;

  int64_t examples() const { return examples_; }
  int64_t truncated() const { return truncated_; }  // examples cut at seq_len + 1 tokens
  int64_t dropped() const { return dropped_; }      // examples with no completion token left after cutting
  int64_t skipped_lines() const { return skipped_lines_; }

 private:
  SFTOptions o_;
  std::vector<std::vector<int64_t>> inputs_, targets_;  // each (T)
  int64_t examples_ = 0, truncated_ = 0, dropped_ = 0, skipped_lines_ = 0;
};

/// Endless batches of an SFTDataset: a seeded order per epoch, epochs as one stream; rank r of R takes
/// the r-th run of B windows in every R * B. State: (epoch, 0, position).
///   llmtrain::data::SFTLoader loader(sft, {.batch_size = 8});  auto b = loader.next();
class SFTLoader final : public BatchSource {
 public:
  struct Options {
    int64_t batch_size = 8;
    int rank = 0, world_size = 1;
    uint64_t seed = 1337;
    bool shuffle = true;
    torch::Device device = torch::kCPU;
  };
  SFTLoader(const SFTDataset& data, Options options);
  Batch next() override;
  DataLoaderState state() const override { return state_; }
  void load_state(const DataLoaderState& state) override;

 private:
  void seek(const DataLoaderState& state);
  const SFTDataset& data_;
  Options o_;
  DataLoaderState state_;
  std::vector<int64_t> order_;
};

}  // namespace llmtrain::data
