#include "hf_config.h"

#include <climits>

#include "../core/json.h"
#include "llmtrain/core/error.h"

namespace llmtrain::io::detail {

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

}  // namespace llmtrain::io::detail
