#include "llmtrain/nn/llama_config.h"

#include <cmath>

#include "llmtrain/core/checked.h"
#include "llmtrain/core/error.h"

namespace llmtrain::nn {

namespace {

struct Shape {
  int64_t vocab, hidden, inter, layers, heads, kv_heads, positions;
  double theta, eps;
  bool tied;
};

LlamaConfig shaped(LlamaFamily family, const Shape& s) {
  return LlamaConfig()
      .family(family)
      .vocab_size(s.vocab)
      .hidden_size(s.hidden)
      .intermediate_size(s.inter)
      .n_layer(s.layers)
      .n_head(s.heads)
      .n_kv_head(s.kv_heads)
      .block_size(s.positions)
      .rope_theta(s.theta)
      .rms_norm_eps(s.eps)
      .tie_word_embeddings(s.tied);
}

LlamaConfig llama3_scaled(LlamaConfig c, double factor) {
  return c.rope_scaling(RopeScaling::kLlama3)
      .rope_factor(factor)
      .rope_low_freq_factor(1.0)
      .rope_high_freq_factor(4.0)
      .rope_original_max_positions(8192);
}

}  // namespace

LlamaConfig LlamaConfig::preset(const std::string& name) {
  using F = LlamaFamily;
  if (name == "llama-3.2-1b")
    return llama3_scaled(shaped(F::kLlama, {128256, 2048, 8192, 16, 32, 8, 131072, 500000.0, 1e-5, true}), 32);
  if (name == "llama-3.2-3b")
    return llama3_scaled(shaped(F::kLlama, {128256, 3072, 8192, 28, 24, 8, 131072, 500000.0, 1e-5, true}), 32);
  if (name == "llama-3.1-8b")
    return llama3_scaled(shaped(F::kLlama, {128256, 4096, 14336, 32, 32, 8, 131072, 500000.0, 1e-5, false}), 8);
  if (name == "llama-2-7b") return shaped(F::kLlama, {32000, 4096, 11008, 32, 32, 32, 4096, 10000.0, 1e-5, false});
  if (name == "mistral-7b")
    return shaped(F::kMistral, {32000, 4096, 14336, 32, 32, 8, 32768, 10000.0, 1e-5, false}).sliding_window(4096);
  if (name == "qwen2.5-0.5b")
    return shaped(F::kQwen2, {151936, 896, 4864, 24, 14, 2, 32768, 1000000.0, 1e-6, true}).qkv_bias(true);
  if (name == "qwen2.5-1.5b")
    return shaped(F::kQwen2, {151936, 1536, 8960, 28, 12, 2, 32768, 1000000.0, 1e-6, true}).qkv_bias(true);
  if (name == "qwen2.5-7b")
    return shaped(F::kQwen2, {152064, 3584, 18944, 28, 28, 4, 32768, 1000000.0, 1e-6, false}).qkv_bias(true);
  if (name == "smollm2-135m") return shaped(F::kLlama, {49152, 576, 1536, 30, 9, 3, 8192, 100000.0, 1e-5, true});
  if (name == "smollm2-360m") return shaped(F::kLlama, {49152, 960, 2560, 32, 15, 5, 8192, 100000.0, 1e-5, true});
  // Tiny shapes for tests: every option of its family on, a few layers, grouped-query attention.
  if (name == "llama-tiny")
    return llama3_scaled(shaped(F::kLlama, {256, 64, 128, 2, 4, 2, 256, 10000.0, 1e-5, true}), 4)
        .rope_original_max_positions(64);
  if (name == "mistral-tiny")
    return shaped(F::kMistral, {256, 64, 160, 2, 4, 1, 256, 10000.0, 1e-5, false}).sliding_window(8);
  if (name == "qwen2-tiny")
    return shaped(F::kQwen2, {256, 64, 96, 2, 4, 2, 256, 1000000.0, 1e-6, false}).qkv_bias(true);
  std::string names;
  for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  LLMTRAIN_CHECK(false, "LlamaConfig: unknown preset \"", name, "\"; expected one of ", names);
  return {};
}

std::vector<std::string> LlamaConfig::preset_names() {
  return {"llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "llama-2-7b", "mistral-7b",   "qwen2.5-0.5b", "qwen2.5-1.5b",
          "qwen2.5-7b",   "smollm2-135m", "smollm2-360m", "llama-tiny", "mistral-tiny", "qwen2-tiny"};
}

std::vector<std::pair<std::string, std::vector<int64_t>>> LlamaConfig::parameter_shapes() const {
  const int64_t C = hidden_size(), D = resolved_head_dim(), H = n_head(), KV = n_kv_head(), I = intermediate_size();
  std::vector<std::pair<std::string, std::vector<int64_t>>> out = {{"model.embed_tokens.weight", {vocab_size(), C}}};
  for (int64_t l = 0; l < n_layer(); ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "self_attn.q_proj.weight", {H * D, C}});
    if (qkv_bias()) out.push_back({p + "self_attn.q_proj.bias", {H * D}});
    out.push_back({p + "self_attn.k_proj.weight", {KV * D, C}});
    if (qkv_bias()) out.push_back({p + "self_attn.k_proj.bias", {KV * D}});
    out.push_back({p + "self_attn.v_proj.weight", {KV * D, C}});
    if (qkv_bias()) out.push_back({p + "self_attn.v_proj.bias", {KV * D}});
    out.push_back({p + "self_attn.o_proj.weight", {C, H * D}});
    if (o_bias()) out.push_back({p + "self_attn.o_proj.bias", {C}});
    out.push_back({p + "mlp.gate_proj.weight", {I, C}});
    out.push_back({p + "mlp.up_proj.weight", {I, C}});
    out.push_back({p + "mlp.down_proj.weight", {C, I}});
    out.push_back({p + "input_layernorm.weight", {C}});
    out.push_back({p + "post_attention_layernorm.weight", {C}});
  }
  out.push_back({"model.norm.weight", {C}});
  if (!tie_word_embeddings()) out.push_back({"lm_head.weight", {vocab_size(), C}});
  return out;
}

int64_t LlamaConfig::num_parameters() const {
  const std::string what = "LlamaConfig: the parameter count";
  int64_t n = 0;
  for (const auto& [name, shape] : parameter_shapes()) {
    int64_t size = 1;
    for (const int64_t d : shape) size = product_checked({size, d}, what);
    n = add_checked(n, size, what);
  }
  return n;
}

double LlamaConfig::flops_per_token(int64_t seq_len) const {
  const double embedding = double(vocab_size()) * double(hidden_size());
  // A tied head counts once, as the head; an untied model's embedding lookup multiplies nothing.
  const double weights = double(num_parameters()) - (tie_word_embeddings() ? 0.0 : embedding);
  return 6.0 * weights + 12.0 * double(n_layer()) * double(n_head()) * double(resolved_head_dim()) * double(seq_len);
}

void LlamaConfig::validate() const {
  const auto in_range = [](const char* name, int64_t v, int64_t max) {
    LLMTRAIN_CHECK(v > 0 && v <= max, "LlamaConfig: ", name, " must be in [1, ", max, "], got ", v);
  };
  in_range("vocab_size", vocab_size(), kMaxVocab);
  in_range("block_size", block_size(), kMaxBlock);
  in_range("n_layer", n_layer(), kMaxLayers);
  in_range("hidden_size", hidden_size(), kMaxWidth);
  in_range("intermediate_size", intermediate_size(), kMaxWidth);
  in_range("n_head", n_head(), kMaxWidth);
  in_range("n_kv_head", n_kv_head(), n_head());
  LLMTRAIN_CHECK(n_head() % n_kv_head() == 0, "LlamaConfig: n_head ", n_head(), " is not a multiple of n_kv_head ",
                 n_kv_head());
  LLMTRAIN_CHECK(head_dim() > 0 || hidden_size() % n_head() == 0, "LlamaConfig: hidden_size ", hidden_size(),
                 " is not divisible by n_head ", n_head(), " (set head_dim)");
  const int64_t D = resolved_head_dim();
  LLMTRAIN_CHECK(D > 0 && D <= 1024 && D % 2 == 0, "LlamaConfig: head_dim must be even and in [2, 1024], got ", D);
  LLMTRAIN_CHECK(rms_norm_eps() > 0.0 && rms_norm_eps() < 1.0, "LlamaConfig: rms_norm_eps must be in (0, 1), got ",
                 rms_norm_eps());
  LLMTRAIN_CHECK(std::isfinite(rope_theta()) && rope_theta() > 1.0, "LlamaConfig: rope_theta must be > 1, got ",
                 rope_theta());
  if (rope_scaling() != RopeScaling::kNone)
    LLMTRAIN_CHECK(std::isfinite(rope_factor()) && rope_factor() >= 1.0, "LlamaConfig: rope_factor must be >= 1, got ",
                   rope_factor());
  if (rope_scaling() == RopeScaling::kLlama3) {
    LLMTRAIN_CHECK(rope_low_freq_factor() > 0 && rope_high_freq_factor() > rope_low_freq_factor(),
                   "LlamaConfig: llama3 rope scaling needs 0 < low_freq_factor < high_freq_factor, got ",
                   rope_low_freq_factor(), " and ", rope_high_freq_factor());
    in_range("rope_original_max_positions", rope_original_max_positions(), kMaxBlock);
  }
  LLMTRAIN_CHECK(sliding_window() >= 0, "LlamaConfig: sliding_window must be >= 0, got ", sliding_window());
  LLMTRAIN_CHECK(sliding_window() == 0 || family() == LlamaFamily::kMistral, "LlamaConfig: a sliding window is ",
                 "Mistral's; ", family(), " has none");
  LLMTRAIN_CHECK(!qkv_bias() || family() != LlamaFamily::kMistral, "LlamaConfig: Mistral has no attention biases");
  LLMTRAIN_CHECK(!o_bias() || family() == LlamaFamily::kLlama, "LlamaConfig: only Llama has o_proj's bias");
  LLMTRAIN_CHECK(dropout() >= 0.0 && dropout() < 1.0, "LlamaConfig: dropout must be in [0, 1), got ", dropout());
  LLMTRAIN_CHECK(initializer_range() > 0.0 && initializer_range() < 1.0,
                 "LlamaConfig: initializer_range must be in (0, 1), got ", initializer_range());
}

}  // namespace llmtrain::nn
