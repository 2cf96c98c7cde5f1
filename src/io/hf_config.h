// A Hugging Face GPT-2 config.json read into a GPT2Config (llmtrain/io/hf_gpt2.h says what is taken),
// without LibTorch, so that the fuzzers reach it.
#pragma once

#include <string>

#include "llmtrain/nn/gpt2_config.h"

namespace llmtrain::io::detail {

/// The model `text`, the content of the config.json at `path`, describes; errors name `path` and the key.
nn::GPT2Config parse_hf_gpt2_config(const std::string& text, const std::string& path);

}  // namespace llmtrain::io::detail
