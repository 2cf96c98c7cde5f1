// Supervised fine-tuning data: JSONL lines {"prompt": ..., "completion": ...}, {"text": ...} or
// {"messages": [{"role": ..., "content": ...}, ...]} become examples whose targets are -100 wherever the
// loss must not look: on prompt tokens, on all but the assistant turns, and on padding. An example is
// [bos] + prompt + completion + end-of-text (bos for the Llama family: SFTOptions::add_bos), the loss on
// the completion and the end-of-text; or the messages in a chat format (llmtrain/data/chat.h), the loss
// on each assistant turn's content and the token that ends it. Without packing each example fills one window (padded);
// with packing, whole examples are laid one after another into windows (an example is never split), anew each epoch
// from that epoch's shuffled order, and each token's position within its example comes with the batch
// (Batch::positions): the model attends only within an example (ops::document_mask), so examples of
// one window never see each other and train exactly as they would alone.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmtrain/data/dataloader.h"
#include "llmtrain/data/sft_options.h"
#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::data {

/// Tokenized, masked SFT examples, laid into windows and batched.
///   llmtrain::data::SFTDataset sft(*tok, {.path = "train.jsonl", .seq_len = 512});
///   auto batch = sft.batch(sft.windows({0, 1, 2, 3}));  // inputs, targets (B, 512); targets -100 off the completion
class SFTDataset {
 public:
  /// A window: the examples (indices) it holds, one after another.
  using Window = std::vector<int64_t>;

  /// Throws llmtrain::Error naming file:line for malformed lines (unless skip_bad_lines), and when no
  /// example has a completion token within seq_len.
  SFTDataset(const tokenizer::Tokenizer& tok, SFTOptions options);
  ~SFTDataset();

  int64_t size() const;  // examples kept
  /// The windows of the examples taken in `order`: packed (SFTOptions::pack) or one example each.
  std::vector<Window> windows(const std::vector<int64_t>& order) const;
  /// `windows` as a batch (B, T); with packing, positions (B, T) too: each token's position within its
  /// example, and the padding after the last example a document of its own.
  Batch batch(const std::vector<Window>& windows) const;
  const SFTOptions& options() const { return o_; }
  /// The chat format messages lines were laid out in: options().chat_format, or the one found in
  /// chat_dir (auto while no messages line was read).
  ChatFormat chat_format() const { return chat_format_; }

  int64_t examples() const { return read_; }        // examples read
  int64_t truncated() const { return truncated_; }  // examples cut at seq_len + 1 tokens
  int64_t dropped() const { return dropped_; }      // examples with no completion token left after cutting
  int64_t skipped_lines() const { return skipped_lines_; }

 private:
  SFTOptions o_;
  std::vector<std::vector<int64_t>> inputs_, targets_;  // each example's, at most seq_len
  std::vector<int64_t> lengths_;
  int64_t pad_ = 0;  // the end-of-text id
  ChatFormat chat_format_ = ChatFormat::kAuto;
  int64_t read_ = 0, truncated_ = 0, dropped_ = 0, skipped_lines_ = 0;
};

/// Endless batches of an SFTDataset: each epoch the examples in a seeded order, laid into windows in
/// that order (packing: anew each epoch), epochs as one stream; rank r of R takes the r-th run of B
/// windows in every R * B. State: (epoch, 0, the window's place in the epoch).
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
  /// The windows of the current epoch.
  int64_t windows_per_epoch() const { return int64_t(windows_.size()); }

 private:
  void seek(const DataLoaderState& state);
  const SFTDataset& data_;
  Options o_;
  DataLoaderState state_;
  std::vector<SFTDataset::Window> windows_;  // the epoch's
};

}  // namespace llmtrain::data
