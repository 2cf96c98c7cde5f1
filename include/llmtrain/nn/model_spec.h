// Which model a run, a checkpoint or a file holds, whatever its family: a GPT-2 shape or a Llama-family
// one (Llama, Mistral, Qwen2). Torch-free, so configs and checkpoint states are read and checked before
// anything is allocated; nn::make_model (causal_lm.h) builds the module it describes.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "llmtrain/nn/gpt2_config.h"
#include "llmtrain/nn/llama_config.h"

namespace llmtrain::nn {

/// A model's family and shape.
///   auto spec = llmtrain::nn::ModelSpec::preset("llama-3.2-1b");  // or "gpt2", or a GPT2Config
class ModelSpec {
 public:
  ModelSpec(GPT2Config c) : c_(std::move(c)) {}   // NOLINT: a shape of either family is a spec
  ModelSpec(LlamaConfig c) : c_(std::move(c)) {}  // NOLINT
  /// A preset of either family: GPT2Config's names (tiny, gpt2, ...) or LlamaConfig's (llama-3.2-1b,
  /// llama-tiny, ...). Throws llmtrain::Error listing them all for another name.
  static ModelSpec preset(const std::string& name);
  static std::vector<std::string> preset_names();

  bool is_gpt2() const { return std::holds_alternative<GPT2Config>(c_); }
  /// The shape of its family; throws llmtrain::Error naming the family when it is the other one.
  const GPT2Config& gpt2() const;
  const LlamaConfig& llama() const;
  GPT2Config& gpt2();
  LlamaConfig& llama();
  /// gpt2, llama, mistral or qwen2.
  std::string family() const;

  int64_t vocab_size() const;
  int64_t block_size() const;
  /// Columns of the logits the model computes: vocab_size, GPT-2's padded to a multiple of 128.
  int64_t logits_width() const;
  /// The parameters the model stores (GPT-2's padded embedding rows included): what its memory holds.
  int64_t stored_parameters() const;
  /// Training FLOPs per token at sequence length `seq_len` (each family's count).
  double flops_per_token(int64_t seq_len) const;
  /// Throws llmtrain::Error naming the first field out of range (the family's validate()).
  void validate() const;
  /// Whether models of both specs have the same tensors: the same family and every size and option
  /// alike (dropout and the initial weights' spread aside).
  bool same_shape(const ModelSpec& other) const;
  /// One line for people: "GPT-2, 12 layers x 768 wide", "Llama, 16 layers x 2048 wide, 32 heads
  /// over 8 key/value heads".
  std::string summary() const;
  /// The family and every field same_shape compares, for errors: "gpt2: vocab_size 50257, ...".
  std::string describe() const;

 private:
  std::variant<GPT2Config, LlamaConfig> c_;
};

}  // namespace llmtrain::nn
