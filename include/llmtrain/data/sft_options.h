// What an SFTDataset (llmtrain/data/sft.h) reads, apart from the dataset, so that the reader of SFT
// JSONL stands without LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include "llmtrain/data/chat.h"

namespace llmtrain::data {

/// What an SFTDataset reads.
struct SFTOptions {
  std::string path;        // JSONL
  int64_t seq_len = 1024;  // T
  bool pack = false;       // several examples per window
  bool skip_bad_lines = false;
  std::string prompt_field = "prompt", completion_field = "completion", text_field = "text";
  std::string messages_field = "messages";
  /// How messages lines are laid out; auto: as the chat_template of chat_dir's tokenizer_config.json
  /// says (chat_dir empty: messages lines are refused).
  ChatFormat chat_format = ChatFormat::kAuto;
  std::string chat_dir;
  /// Prompt and completion or text examples start with the tokenizer's bos, when it has one (the
  /// Llama family's models expect it; a chat format writes its own).
  bool add_bos = false;
};

}  // namespace llmtrain::data
