// The tensors of a Hugging Face folder, whichever family: model.safetensors, or the shards its
// model.safetensors.index.json lists; and writing them, in shards with an index past a size.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "llmtrain/io/safetensors.h"

namespace llmtrain::io::detail {

/// True for the weights of GPT-2's layers that Hugging Face stores (in, out) (its Conv1D), by llmtrain's
/// name (transformer.h.0.attn.c_attn.weight).
bool hf_gpt2_conv1d(const std::string& name);

/// The text of `dir`/config.json, its path in `path`. Throws llmtrain::Error naming the folder when it
/// has none.
std::string read_hf_config(const std::string& dir, std::string* path);
std::string shape_str(at::IntArrayRef s);

/// Every tensor of the folder `dir` by llmtrain's name for it (`rename` maps a file's key to it), with
/// the file it lies in. Throws llmtrain::Error naming the file for an index that names a missing
/// shard or a path outside the folder, and for a tensor found twice.
struct HfWeights {
  HfWeights(const std::string& dir, const std::function<std::string(const std::string&)>& rename);
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, std::pair<const SafetensorsFile*, std::string>> by_name;  // ours -> (file, key in file)
};

/// Writes `tensors` into the folder being filled, `tmp`: one model.safetensors up to `shard_bytes`,
/// past it model-0000i-of-0000n.safetensors files of at most that much (a tensor never split) and
/// model.safetensors.index.json, as transformers' save_pretrained does.
void save_hf_weights(const std::string& tmp, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                     int64_t shard_bytes = int64_t(5) << 30);

}  // namespace llmtrain::io::detail
