// Hugging Face config.json files read into llmtrain's shapes (llmtrain/io/hf_gpt2.h and hf_llama.h say
// what is taken), without LibTorch, so that the fuzzers reach them.
#pragma once

#include <string>

#include "llmtrain/nn/gpt2_config.h"
#include "llmtrain/nn/llama_config.h"
#include "llmtrain/nn/model_spec.h"

namespace llmtrain::io::detail {

/// The model `text`, the content of the config.json at `path`, describes; errors name `path` and the key.
nn::GPT2Config parse_hf_gpt2_config(const std::string& text, const std::string& path);

/// The Llama, Mistral or Qwen2 model `text` (config.json at `path`) describes, in transformers' 4.x form
/// (rope_theta, rope_scaling) or 5.x form (rope_parameters). What llmtrain does not implement is refused
/// with an error naming `path` and the key.
nn::LlamaConfig parse_hf_llama_config(const std::string& text, const std::string& path);

/// The model of any family llmtrain implements that `text` (config.json at `path`) describes: its
/// model_type picks parse_hf_gpt2_config or parse_hf_llama_config; another is refused naming it.
nn::ModelSpec parse_hf_model_config(const std::string& text, const std::string& path);

/// config.json's text for `cfg`, in the 4.x form (which transformers 5 reads too); `dtype` as it names
/// it ("float32", "bfloat16"), bos and eos ids null when unset (< 0).
std::string hf_llama_config_json(const nn::LlamaConfig& cfg, const std::string& dtype, int64_t bos_id, int64_t eos_id);

}  // namespace llmtrain::io::detail
