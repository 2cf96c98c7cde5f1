// Hugging Face folders of the Llama family (LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM):
// config.json and model.safetensors, or shards listed in model.safetensors.index.json, in F32, F16 or
// BF16. Names map one to one; a tied head has no lm_head.weight in the files.
#pragma once

#include <cstdint>
#include <string>

#include "llmtrain/core/fs.h"
#include "llmtrain/io/hf_gpt2.h"
#include "llmtrain/nn/llama.h"

namespace llmtrain::io {

/// The shape config.json describes (transformers 4.x and 5.x forms). Throws llmtrain::Error naming the
/// file and key for another model type, and for what llmtrain does not implement: another activation,
/// MLP biases, tensor-parallel slices, Qwen2's sliding window, rope types other than default, linear
/// and llama3.
nn::LlamaConfig hf_llama_config(const std::string& dir);

/// A float32 model with the folder's weights. Throws llmtrain::Error naming the file and tensor for a
/// missing, unknown or misshapen tensor, a shard the index names that is missing, or a tied head whose
/// lm_head.weight differs from the embedding.
///   nn::Llama model = llmtrain::io::load_hf_llama("Llama-3.2-1B");  // a save_pretrained folder
nn::Llama load_hf_llama(const std::string& dir);

/// Writes `model` as a Hugging Face folder (config.json, generation_config.json, the weights in the
/// model's dtype, sharded past 5 GB, and what `extras` adds) that transformers' AutoModelForCausalLM
/// loads, through fs::write_dir_atomic: a crash never leaves a half-written folder under `dir`, and an
/// existing `dir` that llmtrain did not write is replaced only with `options.force`.
void save_hf_llama(nn::Llama& model, const std::string& dir, const fs::OutputOptions& options = {},
                   const HfExtras& extras = {});

}  // namespace llmtrain::io
