// Hugging Face GPT-2 checkpoints: a folder with config.json and model.safetensors, or shards listed in
// model.safetensors.index.json. Names map one to one (llmtrain uses Hugging Face's), with three
// differences handled here: Conv1D weights are stored (in, out) where llmtrain's Linear holds
// (out, in); llmtrain pads the vocabulary to a multiple of 128 rows (the padding rows are zero inside
// and cut off on export); and the head is tied to wte, so lm_head.weight is neither needed nor written.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "llmtrain/core/fs.h"
#include "llmtrain/nn/gpt2.h"

namespace llmtrain::io {

/// True when `dir` is a folder with config.json and model.safetensors or model.safetensors.index.json.
bool is_hf_dir(const std::string& dir);

/// The model shape config.json describes. Throws llmtrain::Error naming the file and key for a model
/// type other than gpt2, a missing or wrong-typed key, an activation other than GELU (tanh), a
/// feed-forward width other than 4 n_embd, or untied embeddings. Dropout is 0 (set it to fine-tune).
nn::GPT2Config hf_gpt2_config(const std::string& dir);

/// A float32 GPT-2 with the folder's weights (F32, F16 or BF16 in the files). Keys may carry the
/// "transformer." prefix or not; attn.bias and attn.masked_bias buffers are skipped; an lm_head.weight
/// must equal wte. Throws llmtrain::Error naming the file and tensor for a missing, unknown or
/// misshapen tensor, or a shard the index names that is missing.
///   nn::GPT2 model = llmtrain::io::load_hf_gpt2("gpt2");  // a save_pretrained folder
nn::GPT2 load_hf_gpt2(const std::string& dir);

/// What an exported folder says of its special tokens, and the other files it carries.
struct HfExtras {
  /// config.json's bos_token_id and eos_token_id; unset: GPT-2's 50256 for a 50257-id vocabulary, else
  /// null (an id that is no end-of-text would let generation run past every document end).
  std::optional<int64_t> bos_id, eos_id;
  /// Writes more files (the tokenizer's) into the folder being filled, before it is swapped in.
  std::function<void(const std::string& dir)> write;
};

/// Writes `model` as a Hugging Face folder (config.json, generation_config.json, model.safetensors in
/// the model's dtype, and what `extras` adds) that transformers' GPT2LMHeadModel.from_pretrained
/// loads, through fs::write_dir_atomic: written beside `dir` and swapped in, so a crash never leaves a
/// half-written folder under `dir`; an existing `dir` that llmtrain did not write is replaced only
/// with `options.force`. (train::save_hf_model adds the model's tokenizer.)
void save_hf_gpt2(nn::GPT2& model, const std::string& dir, const fs::OutputOptions& options = {},
                  const HfExtras& extras = {});

}  // namespace llmtrain::io
