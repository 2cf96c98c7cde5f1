// The shape of a Llama-family model (Hugging Face's LlamaForCausalLM, MistralForCausalLM and
// Qwen2ForCausalLM), apart from the module itself (llmtrain/nn/llama.h), so that configs and file
// headers are read and checked without LibTorch.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "llmtrain/core/choice.h"

namespace llmtrain::nn {

/// Which Hugging Face architecture a Llama-family model is, for its names in config.json: they differ
/// only in what each allows (Qwen2's q/k/v biases, Mistral's sliding window).
enum class LlamaFamily { kLlama, kMistral, kQwen2 };

inline const ChoiceNames<LlamaFamily>& choice_names(LlamaFamily) {
  static const ChoiceNames<LlamaFamily> names{
      {LlamaFamily::kLlama, "llama"}, {LlamaFamily::kMistral, "mistral"}, {LlamaFamily::kQwen2, "qwen2"}};
  return names;
}

/// How rotary frequencies are stretched for contexts past the trained one (config.json's rope_scaling):
/// none, `linear` (every frequency divided by factor) or `llama3` (low frequencies divided by factor,
/// high ones kept, a smooth blend between low_freq_factor and high_freq_factor).
enum class RopeScaling { kNone, kLinear, kLlama3 };

inline const ChoiceNames<RopeScaling>& choice_names(RopeScaling) {
  static const ChoiceNames<RopeScaling> names{
      {RopeScaling::kNone, "default"}, {RopeScaling::kLinear, "linear"}, {RopeScaling::kLlama3, "llama3"}};
  return names;
}

/// Shape of a Llama-family model, with presets of the published checkpoints' shapes.
///   auto cfg = llmtrain::nn::LlamaConfig::preset("llama-3.2-1b");
struct LlamaConfig {
  TORCH_ARG(Choice<LlamaFamily>, family) = LlamaFamily::kLlama;
  TORCH_ARG(int64_t, vocab_size) = 32000;
  TORCH_ARG(int64_t, hidden_size) = 4096;
  TORCH_ARG(int64_t, intermediate_size) = 11008;
  TORCH_ARG(int64_t, n_layer) = 32;
  TORCH_ARG(int64_t, n_head) = 32;
  TORCH_ARG(int64_t, n_kv_head) = 32;     // grouped-query attention: n_head / n_kv_head queries a key
  TORCH_ARG(int64_t, head_dim) = 0;       // 0: hidden_size / n_head
  TORCH_ARG(int64_t, block_size) = 4096;  // max_position_embeddings
  TORCH_ARG(double, rms_norm_eps) = 1e-5;
  TORCH_ARG(double, rope_theta) = 10000.0;
  TORCH_ARG(Choice<RopeScaling>, rope_scaling) = RopeScaling::kNone;
  TORCH_ARG(double, rope_factor) = 1.0;                    // linear, llama3
  TORCH_ARG(double, rope_low_freq_factor) = 1.0;           // llama3
  TORCH_ARG(double, rope_high_freq_factor) = 4.0;          // llama3
  TORCH_ARG(int64_t, rope_original_max_positions) = 8192;  // llama3
  TORCH_ARG(bool, qkv_bias) = false;             // q_proj, k_proj, v_proj biases (Qwen2; Llama's attention_bias)
  TORCH_ARG(bool, o_bias) = false;               // o_proj's bias (Llama's attention_bias)
  TORCH_ARG(bool, tie_word_embeddings) = false;  // the head is embed_tokens (no lm_head.weight)
  TORCH_ARG(int64_t, sliding_window) = 0;        // Mistral: a query sees the last sliding_window keys; 0: all
  TORCH_ARG(double, dropout) = 0.0;              // on the attention weights (attention_dropout)
  TORCH_ARG(double, initializer_range) = 0.02;   // the standard deviation of random initial weights

 public:  // TORCH_ARG leaves the struct in private mode
  /// Published shapes: llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, llama-2-7b, mistral-7b (v0.1),
  /// qwen2.5-0.5b, qwen2.5-1.5b, qwen2.5-7b, smollm2-135m, smollm2-360m; and tiny ones for tests,
  /// llama-tiny (llama3 rope scaling, tied head), mistral-tiny (sliding window 8) and qwen2-tiny (q/k/v
  /// biases). Throws llmtrain::Error for other names.
  static LlamaConfig preset(const std::string& name);
  static std::vector<std::string> preset_names();

  int64_t resolved_head_dim() const { return head_dim() > 0 ? head_dim() : hidden_size() / n_head(); }
  /// Every parameter by its Hugging Face name, with its shape (linear weights (out, in)).
  std::vector<std::pair<std::string, std::vector<int64_t>>> parameter_shapes() const;
  /// The parameters the model holds (as transformers counts them: a tied head once).
  int64_t num_parameters() const;
  /// Training FLOPs per token at sequence length T (forward + backward): 6 per weight a token
  /// multiplies (the head, not the embedding lookup) and 12 L H D T for attention's two products.
  double flops_per_token(int64_t seq_len) const;
  /// Throws llmtrain::Error naming the first field out of range: sizes positive and bounded, n_head a
  /// multiple of n_kv_head, an even head_dim, the family's options (biases: Llama and Qwen2; the sliding
  /// window: Mistral).
  void validate() const;

  static constexpr int64_t kMaxVocab = (int64_t(1) << 31) - 1;
  static constexpr int64_t kMaxBlock = int64_t(1) << 24;
  static constexpr int64_t kMaxLayers = int64_t(1) << 12;
  static constexpr int64_t kMaxWidth = int64_t(1) << 20;
};

}  // namespace llmtrain::nn
