// Batches of (B, T) windows from token shards. A window is T + 1 consecutive tokens of one shard
// (inputs = the first T, targets = the last T); windows start every T tokens. Each epoch visits the
// shards in a seeded order and each shard's windows in a seeded order (or both in file order without
// shuffling); the epochs follow one another as one endless stream. Rank r of R takes the r-th run of B
// windows out of every R * B, so R ranks together read exactly what one process reads in R consecutive
// batches. With ShuffleUnit::kBatch the seeded order is of whole groups of R * B consecutive windows,
// drawn as llm.c's DataLoader draws it (a batch is a run of the text; a shard's last partial group is
// left out; with seed s, the batches llm.c reads on one process with seed s: 42 there). The state
// (epoch, shard, position) names the next window, so a restored loader continues with the very same
// batches.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmtrain/data/shuffle_unit.h"

namespace llmtrain::data {

/// Where a DataLoader reads from and how.
struct DataLoaderOptions {
  std::string pattern;     // shard files, a glob such as "data/sotu/train_*.bin"
  int64_t batch_size = 8;  // B, per rank
  int64_t seq_len = 1024;  // T
  int rank = 0;
  int world_size = 1;
  uint64_t seed = 1337;
  bool shuffle = true;
  ShuffleUnit shuffle_unit = ShuffleUnit::kWindow;
  int64_t vocab_size = 0;              // when > 0, a token id at or above it is an error naming shard and position
  int prefetch = 2;                    // batches prepared ahead by a background thread (0: none)
  torch::Device device = torch::kCPU;  // where batches land; pinned host memory and async copies for CUDA
};

/// A batch: inputs and targets (B, T) int64, targets shifted by one token; positions (B, T) int64 when
/// its windows hold several documents (packed SFT examples): each token's position within its own,
/// which keeps attention within documents (GPT2::forward's position_ids).
struct Batch {
  torch::Tensor inputs;     // (B, T)
  torch::Tensor targets;    // (B, T)
  torch::Tensor positions;  // (B, T), or undefined: each row is one text
};

/// The position of the next window: the epoch, the shard's place in that epoch's order, and the
/// window's place in that shard's order.
struct DataLoaderState {
  int64_t epoch = 0;
  int64_t shard = 0;
  int64_t position = 0;
  bool operator==(const DataLoaderState& o) const {
    return epoch == o.epoch && shard == o.shard && position == o.position;
  }
};

/// An endless, resumable stream of batches: what the Trainer reads (DataLoader over shards, SFTLoader
/// over SFT JSONL).
///   llmtrain::data::BatchSource& src = loader;  auto b = src.next();  auto s = src.state();
class BatchSource {
 public:
  virtual ~BatchSource() = default;
  /// The next batch.
  virtual Batch next() = 0;
  /// The state to resume from: the position after the last batch next() returned.
  virtual DataLoaderState state() const = 0;
  /// Continues from `state` (as returned by state()).
  virtual void load_state(const DataLoaderState& state) = 0;
};

/// Endless, resumable batches from memory-mapped shards.
///   llmtrain::data::DataLoader loader({.pattern = "data/sotu/train_*.bin", .batch_size = 16});
///   auto batch = loader.next();  auto state = loader.state();  ...  loader.load_state(state);
class DataLoader final : public BatchSource {
 public:
  /// Throws llmtrain::Error when the pattern matches no file, a shard is invalid or shorter than one
  /// window (seq_len + 1 tokens; one group of world_size * batch_size windows with kBatch), or B, T,
  /// rank or world size are out of range.
  explicit DataLoader(DataLoaderOptions options);
  ~DataLoader() override;

  /// The next batch; its windows may straddle the end of an epoch.
  Batch next() override;
  DataLoaderState state() const override;
  /// Continues from `state` (as returned by state(), also by another loader over the same shards).
  void load_state(const DataLoaderState& state) override;

  int64_t num_tokens() const;         // in all shards
  int64_t windows_per_epoch() const;  // visited, over all ranks
  const std::vector<std::string>& files() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain::data
