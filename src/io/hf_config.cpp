#include "hf_config.h"

#include <climits>

#include "../core/json.h"
#include "llmtrain/core/error.h"

namespace llmtrain::io::detail {

using nn::RopeScaling;

nn::GPT2Config parse_hf_gpt2_config(const std::string& text, const std::string& path) {
  const json::Json j = json::parse(text, path);
  const json::Object c(j, path);
  const std::string type = c.has("model_type") ? c.string("model_type") : "";
  LLMTRAIN_CHECK(type == "gpt2", path, ": model_type ", type.empty() ? "(missing)" : type,
                 " is not supported (only gpt2)");
  const auto size = [&](const char* key, int64_t max) { return c.integer(key, 1, max); };
  nn::GPT2Config cfg;
  cfg.vocab_size(size("vocab_size", nn::GPT2Config::kMaxVocab))
      .block_size(size("n_positions", nn::GPT2Config::kMaxBlock))
      .n_layer(size("n_layer", nn::GPT2Config::kMaxLayers))
      .n_head(size("n_head", nn::GPT2Config::kMaxEmbd))
      .n_embd(size("n_embd", nn::GPT2Config::kMaxEmbd))
      .dropout(0.0);
  if (c.has("layer_norm_epsilon")) cfg.layer_norm_eps(c.number("layer_norm_epsilon", 1e-30, 0.5));
  const std::string act = c.has("activation_function") ? c.string("activation_function") : "gelu_new";
  LLMTRAIN_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", path, ": activation_function ", act,
                 " is not supported (GPT-2's gelu_new, the tanh approximation)");
  if (c.has("n_inner") && !c.at("n_inner").is_null())
    LLMTRAIN_CHECK(c.integer("n_inner", 1, INT64_MAX) == 4 * cfg.n_embd(), path, ": n_inner ",
                   json::excerpt(c.at("n_inner")), " is not supported (4 * n_embd = ", 4 * cfg.n_embd(), ")");
  LLMTRAIN_CHECK(!c.has("tie_word_embeddings") || c.boolean("tie_word_embeddings"), path,
                 ": tie_word_embeddings false is not supported (llmtrain ties the head to wte)");
  try {
    cfg.validate();
  } catch (const llmtrain::Error& e) {
    LLMTRAIN_CHECK(false, path, ": ", e.what());
  }
  return cfg;
}

nn::ModelSpec parse_hf_model_config(const std::string& text, const std::string& path) {
  const json::Json j = json::parse(text, path);
  const json::Object c(j, path);
  const std::string type = c.has("model_type") ? c.string("model_type") : "";
  if (type == "gpt2") return parse_hf_gpt2_config(text, path);
  nn::LlamaFamily family{};
  LLMTRAIN_CHECK(Choice<nn::LlamaFamily>::find(type, &family), path, ": model_type ",
                 type.empty() ? "(missing)" : "\"" + type + "\"", " is not a family llmtrain implements (gpt2, ",
                 Choice<nn::LlamaFamily>::names(), ")");
  return parse_hf_llama_config(text, path);
}

nn::LlamaConfig parse_hf_llama_config(const std::string& text, const std::string& path) {
  using nn::LlamaConfig;
  const json::Json j = json::parse(text, path);
  const json::Object c(j, path);
  const std::string type = c.has("model_type") ? c.string("model_type") : "";
  nn::LlamaFamily family{};
  LLMTRAIN_CHECK(Choice<nn::LlamaFamily>::find(type, &family), path, ": model_type ", type.empty() ? "(missing)" : type,
                 " is not supported here (", Choice<nn::LlamaFamily>::names(), ")");
  const auto size = [&](const char* key, int64_t max) { return c.integer(key, 1, max); };
  const auto unsupported = [&](const std::string& key, const std::string& why) {
    LLMTRAIN_CHECK(false, path, ": ", key, " ", json::excerpt(c.at(key)), " is not supported (", why, ")");
  };
  const auto is_null = [&](const char* key) { return !c.has(key) || c.at(key).is_null(); };
  LlamaConfig cfg;
  cfg.family(family)
      .vocab_size(size("vocab_size", LlamaConfig::kMaxVocab))
      .hidden_size(size("hidden_size", LlamaConfig::kMaxWidth))
      .intermediate_size(size("intermediate_size", LlamaConfig::kMaxWidth))
      .n_layer(size("num_hidden_layers", LlamaConfig::kMaxLayers))
      .n_head(size("num_attention_heads", LlamaConfig::kMaxWidth))
      .block_size(size("max_position_embeddings", LlamaConfig::kMaxBlock));
  cfg.n_kv_head(is_null("num_key_value_heads") ? cfg.n_head() : size("num_key_value_heads", LlamaConfig::kMaxWidth));
  if (!is_null("head_dim")) cfg.head_dim(size("head_dim", 1024));
  if (c.has("rms_norm_eps")) cfg.rms_norm_eps(c.number("rms_norm_eps", 1e-30, 0.5));
  if (c.has("initializer_range")) cfg.initializer_range(c.number("initializer_range", 1e-12, 0.999));
  if (c.has("attention_dropout")) cfg.dropout(c.number("attention_dropout", 0.0, 0.999));
  if (c.has("tie_word_embeddings")) cfg.tie_word_embeddings(c.boolean("tie_word_embeddings"));
  if (c.has("hidden_act") && c.string("hidden_act") != "silu") unsupported("hidden_act", "SwiGLU's silu");
  if (c.has("mlp_bias") && c.boolean("mlp_bias")) unsupported("mlp_bias", "the MLP has no biases");
  if (c.has("pretraining_tp") && !c.at("pretraining_tp").is_null() && c.integer("pretraining_tp", 0, 1 << 20) > 1)
    unsupported("pretraining_tp", "1: one tensor-parallel slice");
  switch (family) {
    case nn::LlamaFamily::kLlama:
      if (c.has("attention_bias") && c.boolean("attention_bias")) cfg.qkv_bias(true).o_bias(true);
      break;
    case nn::LlamaFamily::kQwen2:
      cfg.qkv_bias(true);  // Qwen2's q, k and v projections always have them
      if (c.has("use_sliding_window") && c.boolean("use_sliding_window"))
        unsupported("use_sliding_window", "Qwen2's layers attend to the whole sequence here");
      break;
    case nn::LlamaFamily::kMistral:
      if (!is_null("sliding_window")) cfg.sliding_window(c.integer("sliding_window", 1, LlamaConfig::kMaxBlock));
      break;
  }
  if (c.has("layer_types") && c.at("layer_types").is_array())
    for (const auto& t : c.at("layer_types"))
      if (!(t.is_string() && (t.get<std::string>() == "full_attention" ||
                              (t.get<std::string>() == "sliding_attention" && cfg.sliding_window() > 0))))
        unsupported("layer_types", "full_attention layers, or Mistral's sliding_attention");
  // The rotary parameters: transformers 5's rope_parameters, or 4.x's rope_theta and rope_scaling.
  const bool v5 = !is_null("rope_parameters");
  if (!v5 && c.has("rope_theta")) cfg.rope_theta(c.number("rope_theta", 1.0, 1e30));
  const char* scaling_key = v5 ? "rope_parameters" : "rope_scaling";
  if (!is_null(scaling_key)) {
    const json::Object r = c.object(scaling_key);
    if (v5 && r.has("rope_theta")) cfg.rope_theta(r.number("rope_theta", 1.0, 1e30));
    const char* type_key = r.has("rope_type") ? "rope_type" : "type";
    const std::string rope_type = r.has(type_key) ? r.string(type_key) : "default";
    RopeScaling kind{};
    LLMTRAIN_CHECK(Choice<RopeScaling>::find(rope_type, &kind), path, ": ", r.name(type_key), " \"", rope_type,
                   "\" is not supported (", Choice<RopeScaling>::names(), ")");
    cfg.rope_scaling(kind);
    if (kind != RopeScaling::kNone) cfg.rope_factor(r.number("factor", 1.0, 1e6));
    if (kind == RopeScaling::kLlama3)
      cfg.rope_low_freq_factor(r.number("low_freq_factor", 1e-6, 1e6))
          .rope_high_freq_factor(r.number("high_freq_factor", 1e-6, 1e6))
          .rope_original_max_positions(r.integer("original_max_position_embeddings", 1, LlamaConfig::kMaxBlock));
  }
  try {
    cfg.validate();
  } catch (const llmtrain::Error& e) {
    LLMTRAIN_CHECK(false, path, ": ", e.what());
  }
  return cfg;
}

std::string hf_llama_config_json(const nn::LlamaConfig& cfg, const std::string& dtype, int64_t bos_id, int64_t eos_id) {
  using nn::LlamaFamily;
  const char* arch = cfg.family() == LlamaFamily::kMistral ? "MistralForCausalLM"
                     : cfg.family() == LlamaFamily::kQwen2 ? "Qwen2ForCausalLM"
                                                           : "LlamaForCausalLM";
  const auto id = [](int64_t v) { return v >= 0 ? json::Json(v) : json::Json(nullptr); };
  json::Json c = {{"architectures", {arch}},
                  {"model_type", cfg.family().name()},
                  {"vocab_size", cfg.vocab_size()},
                  {"hidden_size", cfg.hidden_size()},
                  {"intermediate_size", cfg.intermediate_size()},
                  {"num_hidden_layers", cfg.n_layer()},
                  {"num_attention_heads", cfg.n_head()},
                  {"num_key_value_heads", cfg.n_kv_head()},
                  {"head_dim", cfg.resolved_head_dim()},
                  {"max_position_embeddings", cfg.block_size()},
                  {"hidden_act", "silu"},
                  {"rms_norm_eps", cfg.rms_norm_eps()},
                  {"rope_theta", cfg.rope_theta()},
                  {"attention_dropout", cfg.dropout()},
                  {"initializer_range", cfg.initializer_range()},
                  {"tie_word_embeddings", cfg.tie_word_embeddings()},
                  {"bos_token_id", id(bos_id)},
                  {"eos_token_id", id(eos_id)},
                  {"torch_dtype", dtype}};
  switch (cfg.rope_scaling().value()) {
    case RopeScaling::kNone: c["rope_scaling"] = nullptr; break;
    case RopeScaling::kLinear: c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", cfg.rope_factor()}}; break;
    case RopeScaling::kLlama3:
      c["rope_scaling"] = {{"rope_type", "llama3"},
                           {"factor", cfg.rope_factor()},
                           {"low_freq_factor", cfg.rope_low_freq_factor()},
                           {"high_freq_factor", cfg.rope_high_freq_factor()},
                           {"original_max_position_embeddings", cfg.rope_original_max_positions()}};
      break;
  }
  if (cfg.family() == LlamaFamily::kLlama) c["attention_bias"] = cfg.qkv_bias(), c["mlp_bias"] = false;
  if (cfg.family() == LlamaFamily::kMistral)
    c["sliding_window"] = cfg.sliding_window() > 0 ? json::Json(cfg.sliding_window()) : json::Json(nullptr);
  if (cfg.family() == LlamaFamily::kQwen2) c["use_sliding_window"] = false;
  return c.dump(2) + "\n";
}

}  // namespace llmtrain::io::detail
