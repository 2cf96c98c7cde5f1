// Supervised fine-tuning data read into masked windows (llmtrain/data/sft.h has the format), without
// LibTorch, so that the fuzzers reach it; SFTDataset batches the windows as tensors.
#pragma once

#include <cstdint>
#include <vector>

#include "llmtrain/data/sft_options.h"
#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::data::detail {

/// The longest window: the longest sequence a model can have (GPT2Config::kMaxBlock).
constexpr int64_t kMaxSeqLen = int64_t(1) << 24;

/// The windows of an SFT JSONL file and what reading it counted.
struct SFTWindows {
  std::vector<std::vector<int64_t>> inputs, targets;  // each (seq_len); targets -100 off the loss
  int64_t examples = 0, truncated = 0, dropped = 0, skipped_lines = 0;
};

/// Reads and lays out `o.path` as SFTDataset's constructor documents; throws llmtrain::Error as it does.
SFTWindows read_sft_windows(const tokenizer::Tokenizer& tok, const SFTOptions& o);

}  // namespace llmtrain::data::detail
