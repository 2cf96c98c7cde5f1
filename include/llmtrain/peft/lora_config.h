// What a LoRA adapter is, in PEFT's terms (adapter_config.json): which layers, the rank, alpha,
// dropout, scaling and initialisation. Without LibTorch, so that the Trainer's config reads it; the
// adapters themselves are in peft/lora.h.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "llmtrain/core/choice.h"

namespace llmtrain::peft {

/// How fresh adapters start (PEFT's init_lora_weights): A as a linear layer's default (uniform within
/// 1/sqrt(in)) and B zero, so the model starts as the base (true, the default); A normal with std 1/r
/// and B zero ("gaussian"); both as linear layers' defaults (false: the model starts changed).
enum class LoraInit { kDefault, kGaussian, kRandom };

inline const ChoiceNames<LoraInit>& choice_names(LoraInit) {
  static const ChoiceNames<LoraInit> names{
      {LoraInit::kDefault, "default"}, {LoraInit::kGaussian, "gaussian"}, {LoraInit::kRandom, "random"}};
  return names;
}

/// How QLoRA stores the frozen base: 4-bit NormalFloat with double quantization (bitsandbytes' QLoRA,
/// ops/nf4.h) or 8-bit rows (LLM.int8-style, ops/int8.h).
enum class BaseFormat { kNF4, kInt8 };

inline const ChoiceNames<BaseFormat>& choice_names(BaseFormat) {
  static const ChoiceNames<BaseFormat> names{{BaseFormat::kNF4, "nf4"}, {BaseFormat::kInt8, "int8"}};
  return names;
}

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
  LoraInit init = LoraInit::kDefault;

  /// True when PEFT would adapt the linear layer `name` (its full name, e.g. model.layers.0.self_attn.q_proj).
  bool targets(const std::string& name, bool is_output_head) const;
  /// The r and the scaling of layer `name` (rank_pattern and alpha_pattern applied).
  int64_t rank_of(const std::string& name) const;
  double scaling_of(const std::string& name) const;
};

/// `cfg` as PEFT's adapter_config.json (task CAUSAL_LM; fan_in_fan_out for GPT-2, whose layers
/// transformers keeps as Conv1D).
std::string lora_config_json(const LoraConfig& cfg, bool gpt2);

/// adapter_config.json of the folder `dir`. Throws llmtrain::Error naming the file and the key for a
/// peft_type other than LORA and for options llmtrain does not implement.
LoraConfig read_lora_config(const std::string& dir);

}  // namespace llmtrain::peft
