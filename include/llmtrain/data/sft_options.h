// What an SFTDataset (llmtrain/data/sft.h) reads, apart from the dataset, so that the reader of SFT
// JSONL stands without LibTorch.
#pragma once

#include <cstdint>
#include <string>

namespace llmtrain::data {

/// What an SFTDataset reads.
struct SFTOptions {
  std::string path;        // JSONL
  int64_t seq_len = 1024;  // T
  bool pack = false;       // several examples per window
  bool skip_bad_lines = false;
  std::string prompt_field = "prompt", completion_field = "completion", text_field = "text";
};

}  // namespace llmtrain::data
