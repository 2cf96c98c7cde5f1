// The shape of a GPT-2 model, apart from the module itself (llmtrain/nn/gpt2.h), so that configs and
// file headers are read and checked without LibTorch.
#pragma once

#include <torch/arg.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace llmtrain::nn {

/// Shape of a GPT-2 model, with Hugging Face's presets.
///   auto cfg = llmtrain::nn::GPT2Config::preset("gpt2").dropout(0.1);
struct GPT2Config {
  TORCH_ARG(int64_t, vocab_size) = 50257;
  TORCH_ARG(int64_t, block_size) = 1024;  // longest sequence (positions)
  TORCH_ARG(int64_t, n_layer) = 12;
  TORCH_ARG(int64_t, n_head) = 12;
  TORCH_ARG(int64_t, n_embd) = 768;
  TORCH_ARG(double, dropout) = 0.0;  // embedding, attention and residual dropout
  TORCH_ARG(double, layer_norm_eps) = 1e-5;

 public:  // TORCH_ARG leaves the struct in private mode
  /// "tiny" (2 layers, 4 heads, 64 wide, 128 positions; for tests), "gpt2" (124M), "gpt2-medium"
  /// (350M), "gpt2-large" (774M), "gpt2-xl" (1558M). Throws llmtrain::Error for other names.
  static GPT2Config preset(const std::string& name);
  static std::vector<std::string> preset_names();

  /// vocab_size rounded up to a multiple of 128: the rows of the token embedding.
  int64_t padded_vocab_size() const;
  int64_t head_dim() const { return n_embd() / n_head(); }
  /// Every parameter of the model by its (Hugging Face) name with the shape llmtrain stores it in:
  /// linear weights (out, in), wte's padded rows included. What a file is checked against before a
  /// model of this shape is allocated.
  std::vector<std::pair<std::string, std::vector<int64_t>>> parameter_shapes() const;
  /// The parameters the model stores, the padded embedding rows included (what its memory holds).
  int64_t stored_parameters() const;
  /// The parameters as Hugging Face counts them: the embedding at its vocab_size real rows.
  int64_t num_parameters() const;
  /// Training FLOPs per token at sequence length `seq_len` (forward + backward): 6 per parameter plus
  /// 12 * n_layer * n_embd * seq_len for attention's scores and weighted sums (the count MFU uses).
  double flops_per_token(int64_t seq_len) const;
  /// Throws llmtrain::Error naming the first field that is out of range: each size must be positive and
  /// at most kMax* (far beyond any real model, so that sizes derived from them never overflow), n_embd a
  /// multiple of n_head.
  void validate() const;

  static constexpr int64_t kMaxVocab = (int64_t(1) << 31) - 128;  // ids are int32, padding included
  static constexpr int64_t kMaxBlock = int64_t(1) << 24;
  static constexpr int64_t kMaxLayers = int64_t(1) << 12;
  static constexpr int64_t kMaxEmbd = int64_t(1) << 20;
};

}  // namespace llmtrain::nn
