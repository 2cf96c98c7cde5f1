// Supervised fine-tuning data read into masked examples and laid into windows (llmtrain/data/sft.h has
// the format), without LibTorch, so that the fuzzers reach it; SFTDataset batches the windows as tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "llmtrain/data/sft_options.h"
#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::data::detail {

/// The longest window: the longest sequence a model can have (GPT2Config::kMaxBlock).
constexpr int64_t kMaxSeqLen = int64_t(1) << 24;

/// One example laid out for training: its input ids and their targets (-100 off the loss), at most
/// seq_len of each.
struct SFTExample {
  std::vector<int64_t> inputs, targets;
};

/// The examples of an SFT JSONL file and what reading it counted.
struct SFTExamples {
  std::vector<SFTExample> examples;
  int64_t read = 0, truncated = 0, dropped = 0, skipped_lines = 0;
  ChatFormat chat_format = ChatFormat::kAuto;  // the one messages lines were laid out in
};

/// Reads `o.path` as SFTDataset's constructor documents; throws llmtrain::Error as it does.
SFTExamples read_sft_examples(const tokenizer::Tokenizer& tok, const SFTOptions& o);

/// A window: the examples (indices) it holds, one after another.
using SFTWindow = std::vector<int64_t>;

/// The windows of examples taken in `order`: with `pack`, each window takes the next examples while
/// their lengths (`lengths`, each in [1, seq_len]) fit in seq_len; otherwise one example a window.
std::vector<SFTWindow> pack_sft_windows(const std::vector<int64_t>& lengths, const std::vector<int64_t>& order,
                                        int64_t seq_len, bool pack);

}  // namespace llmtrain::data::detail
