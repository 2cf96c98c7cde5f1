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
#include "llmtrain/ops/int8.h"
#include "llmtrain/ops/nf4.h"
#include "llmtrain/peft/lora_config.h"

namespace llmtrain::peft {

/// PEFT's lora.Linear as nn's adapter: scaling * lora_B(lora_A(dropout(x))).
class LoraAdapterImpl : public nn::LinearAdapterImpl {
 public:
  /// For a layer of `in` -> `out` features, on the CPU in float32, initialised as `init` says.
  LoraAdapterImpl(int64_t in, int64_t out, int64_t r, double scaling, double dropout, LoraInit init);
  torch::Tensor add_to(const torch::Tensor& y, const torch::Tensor& x) override;

  torch::nn::Linear lora_A{nullptr}, lora_B{nullptr};  // (r, in), (out, r)
  double scaling, dropout;
};

/// QLoRA's frozen weight: NF4 (ops/nf4.h) under its layer as nn's stored weight, computed in the
/// input's dtype. Casting the model (bf16 with fp32 masters) leaves it alone; moving it moves it.
class NF4WeightImpl : public nn::StoredWeightImpl {
 public:
  explicit NF4WeightImpl(const torch::Tensor& weight);
  torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& bias) override;
  torch::Tensor weight(torch::ScalarType dtype) override;
  ops::NF4Weight quantized() const;
  void to(torch::Dtype, bool) override {}
  void to(torch::Device device, torch::Dtype, bool non_blocking) override { Module::to(device, non_blocking); }
  void to(torch::Device device, bool non_blocking) override { Module::to(device, non_blocking); }

 private:
  torch::Tensor packed_, absmax_codes_, absmax2_;
  double offset_ = 0;
  std::vector<int64_t> shape_;
};

/// The same for int8 rows (ops/int8.h).
class Int8WeightImpl : public nn::StoredWeightImpl {
 public:
  explicit Int8WeightImpl(const torch::Tensor& weight);
  torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& bias) override;
  torch::Tensor weight(torch::ScalarType dtype) override;
  void to(torch::Dtype, bool) override {}
  void to(torch::Device device, torch::Dtype, bool non_blocking) override { Module::to(device, non_blocking); }
  void to(torch::Device device, bool non_blocking) override { Module::to(device, non_blocking); }

 private:
  torch::Tensor codes_, absmax_;
};

/// QLoRA's base: the weight of every linear layer but the output head (as bitsandbytes' 4-bit loading
/// leaves the head alone) replaced by its NF4 (or int8) form; the layer's own weight parameter is left
/// empty. Adapters attached before stay. Returns the quantized layers' names.
///   peft::add_lora(*model, cfg);  peft::quantize_base(*model);
std::vector<std::string> quantize_base(nn::CausalLM& model, BaseFormat format = BaseFormat::kNF4);

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

/// save_lora's two files, written into the existing folder `dir` (a checkpoint's, as it is made).
void write_lora_files(nn::CausalLM& model, const LoraConfig& cfg, const std::string& dir);

/// The weights in the PEFT folder `dir` into the adapters `model` has (and its modules_to_save), as they
/// were saved: resuming a LoRA run. Throws llmtrain::Error naming the file and the tensor for a layer
/// without an adapter, a tensor missing or of another shape, before anything changes.
void read_lora_weights(nn::CausalLM& model, const std::string& dir);

/// Writes the model's adapters and `cfg` as a PEFT adapter folder `dir` (adapter_config.json and
/// adapter_model.safetensors), whole or not at all (fs::write_dir_atomic).
///   peft::save_lora(*model, cfg, "runs/lora/adapter");
void save_lora(nn::CausalLM& model, const LoraConfig& cfg, const std::string& dir,
               const fs::OutputOptions& options = {});

/// Folds every attached adapter into its layer (W += scaling B A, in float64, rounded once to W's
/// dtype; a stored weight dequantized first, as PEFT merges into a 4-bit base), removes the adapters
/// and stored weights and lets every parameter require a gradient again: the model is a plain one of
/// its family. Returns the merged layers' names.
std::vector<std::string> merge_lora(nn::CausalLM& model);

/// load_lora, then merge_lora: the folder's adapter folded into `model`.
///   auto model = llmtrain::io::load_hf_model("Llama-3.2-1B");
///   llmtrain::peft::merge_lora(*model, "my-adapter");
std::vector<std::string> merge_lora(nn::CausalLM& model, const std::string& dir);

}  // namespace llmtrain::peft
