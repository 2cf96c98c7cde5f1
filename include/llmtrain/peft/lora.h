// LoRA adapters in Hugging Face PEFT's files: a folder with adapter_config.json and
// adapter_model.safetensors, as PEFT's save_pretrained writes it. An adapted layer computes
// x W^T + scaling (x A^T) B^T with A (r, in) and B (out, r); merging adds scaling B A to W, after which
// the model is a plain one of its family (generate, convert and evaluate it as any other).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "llmtrain/nn/causal_lm.h"

namespace llmtrain::peft {

/// What adapter_config.json says of a LoRA adapter, in PEFT's terms. Options llmtrain does not
/// implement (DoRA, trained biases, layer selection, ...) are refused when it is read, by key.
///   auto cfg = llmtrain::peft::read_lora_config("my-adapter");
struct LoraConfig {
  int64_t r = 8;
  double lora_alpha = 8;
  double lora_dropout = 0;
  bool use_rslora = false;  // scaling alpha / sqrt(r) instead of alpha / r
  /// The layers adapted, PEFT's way: a list of names (a layer whose full name is one, or ends in "." and
  /// one), a regular expression the full name must match (target_regex), or every linear layer but the
  /// output head (all_linear).
  std::vector<std::string> target_modules;
  std::string target_regex;
  bool all_linear = false;
  std::map<std::string, int64_t> rank_pattern;  // a layer name's pattern -> its r
  std::map<std::string, double> alpha_pattern;  // ... -> its lora_alpha
  std::vector<std::string> modules_to_save;     // layers trained in full, stored whole in the adapter
  std::string base_model;                       // base_model_name_or_path, as written

  /// True when PEFT would adapt the linear layer `name` (its full name, e.g. model.layers.0.self_attn.q_proj).
  bool targets(const std::string& name, bool is_output_head) const;
  /// The r and the scaling of layer `name` (rank_pattern and alpha_pattern applied).
  int64_t rank_of(const std::string& name) const;
  double scaling_of(const std::string& name) const;
};

/// adapter_config.json of the folder `dir`. Throws llmtrain::Error naming the file and the key for a
/// peft_type other than LORA and for options llmtrain does not implement.
LoraConfig read_lora_config(const std::string& dir);

/// Folds the adapter in the folder `dir` into `model`'s weights: W += scaling B A for every adapted
/// layer, and the weights of modules_to_save replace the model's. Returns the adapted layers' names.
/// Everything is checked before any weight changes: a targeted layer the model lacks or the file lacks,
/// a config whose targets match no layer, shapes of another base (named with both shapes), a rank
/// that disagrees with the config: each a llmtrain::Error naming the file and the layer.
///   auto model = llmtrain::io::load_hf_model("Llama-3.2-1B");
///   llmtrain::peft::merge_lora(*model, "my-adapter");
std::vector<std::string> merge_lora(nn::CausalLM& model, const std::string& dir);

}  // namespace llmtrain::peft
