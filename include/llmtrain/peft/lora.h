// LoRA adapters, trained and read in Hugging Face PEFT's files: a folder with adapter_config.json and
// adapter_model.safetensors, as PEFT's save_pretrained writes it. An adapted layer computes
// x W^T + b + scaling B(A(dropout(x))) with A (r, in) and B (out, r): a LoraAdapter registered under
// the layer (nn/adapter.h), whose parameters are named <layer>.adapter.lora_A.weight and
// <layer>.adapter.lora_B.weight (PEFT's file: base_model.model.<layer>.lora_A.weight). Merging adds
// scaling B A to W, after which the model is a plain one of its family (generate, convert and
// evaluate it as any other).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "llmtrain/core/fs.h"
#include "llmtrain/nn/adapter.h"
#include "llmtrain/nn/causal_lm.h"

namespace llmtrain::peft {

/// How fresh adapters start (PEFT's init_lora_weights): A as a linear layer's default (uniform within
/// 1/sqrt(in)) and B zero, so the model starts as the base (true, the default); A normal with std 1/r
/// and B zero ("gaussian"); both as linear layers' defaults (false: the model starts changed).
enum class LoraInit { kDefault, kGaussian, kRandom };

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

/// PEFT's lora.Linear as nn's adapter: scaling * lora_B(lora_A(dropout(x))).
class LoraAdapterImpl : public nn::LinearAdapterImpl {
 public:
  /// For a layer of `in` -> `out` features, on the CPU in float32, initialised as `init` says.
  LoraAdapterImpl(int64_t in, int64_t out, int64_t r, double scaling, double dropout, LoraInit init);
  torch::Tensor forward(const torch::Tensor& x) override;

  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};  // (r, in), (out, r)
  double scaling, dropout;
};

/// Fresh adapters on every linear layer `cfg` targets (from the global generator, after
/// torch::manual_seed, in `init`'s way; on each layer's device and dtype) and the base frozen: every
/// parameter but the adapters' and those of modules_to_save stops requiring a gradient. Returns the
/// adapted layers' names. Throws llmtrain::Error, before anything changes, for targets that match no
/// layer, a layer that has an adapter already, a rank above the layer's smaller side, and
/// modules_to_save that name no module (each named).
///   peft::LoraConfig cfg;  cfg.target_modules = {"q_proj", "v_proj"};  peft::add_lora(*model, cfg);
std::vector<std::string> add_lora(nn::CausalLM& model, const LoraConfig& cfg);

/// Attaches the adapter in the folder `dir` to `model` unmerged, its weights loaded, and freezes the
/// base as add_lora does (so that training goes on from it); the weights of modules_to_save replace
/// the model's. Returns its config. Everything is checked before anything changes: a targeted layer
/// the model lacks or the file lacks, a config whose targets match no layer, shapes of another base
/// (named with both shapes), a rank that disagrees with the config: each a llmtrain::Error naming
/// the file and the layer.
LoraConfig load_lora(nn::CausalLM& model, const std::string& dir);

/// The adapters' tensors and those of modules_to_save under PEFT's names (base_model.model.<layer>.
/// lora_A.weight, ...; GPT-2's Conv1D weights of modules to save as (in, out)), on the CPU, contiguous.
std::vector<std::pair<std::string, torch::Tensor>> lora_tensors(nn::CausalLM& model, const LoraConfig& cfg);

/// Writes the model's adapters and `cfg` as a PEFT adapter folder `dir` (adapter_config.json and
/// adapter_model.safetensors), whole or not at all (fs::write_dir_atomic).
///   peft::save_lora(*model, cfg, "runs/lora/adapter");
void save_lora(nn::CausalLM& model, const LoraConfig& cfg, const std::string& dir,
               const fs::OutputOptions& options = {});

/// Folds every attached adapter into its layer (W += scaling B A, in float64, rounded once to W's
/// dtype), removes the adapters and lets every parameter require a gradient again: the model is a
/// plain one of its family. Returns the merged layers' names.
std::vector<std::string> merge_lora(nn::CausalLM& model);

/// load_lora, then merge_lora: the folder's adapter folded into `model`.
///   auto model = llmtrain::io::load_hf_model("Llama-3.2-1B");
///   llmtrain::peft::merge_lora(*model, "my-adapter");
std::vector<std::string> merge_lora(nn::CausalLM& model, const std::string& dir);

}  // namespace llmtrain::peft
