#include "llmtrain/nn/gpt2_config.h"

#include "llmtrain/core/checked.h"
#include "llmtrain/core/error.h"

namespace llmtrain::nn {
namespace {
constexpr int64_t kVocabMultiple = 128;  // padded vocab keeps the classifier GEMM aligned
}  // namespace

GPT2Config GPT2Config::preset(const std::string& name) {
  const auto make = [](int64_t layers, int64_t heads, int64_t width) {
    return GPT2Config().n_layer(layers).n_head(heads).n_embd(width);
  };
  if (name == "tiny") return make(2, 4, 64).block_size(128);
  if (name == "gpt2") return make(12, 12, 768);
  if (name == "gpt2-medium") return make(24, 16, 1024);
  if (name == "gpt2-large") return make(36, 20, 1280);
  if (name == "gpt2-xl") return make(48, 25, 1600);
  std::string names;
  for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  LLMTRAIN_CHECK(false, "GPT2Config: unknown preset \"", name, "\"; expected one of ", names);
  return {};
}

std::vector<std::string> GPT2Config::preset_names() { return {"tiny", "gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl"}; }

int64_t GPT2Config::padded_vocab_size() const {
  return (vocab_size() + kVocabMultiple - 1) / kVocabMultiple * kVocabMultiple;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> GPT2Config::parameter_shapes() const {
  const int64_t C = n_embd();
  std::vector<std::pair<std::string, std::vector<int64_t>>> out = {{"transformer.wte.weight", {padded_vocab_size(), C}},
                                                                   {"transformer.wpe.weight", {block_size(), C}}};
  for (int64_t l = 0; l < n_layer(); ++l) {
    const std::string h = "transformer.h." + std::to_string(l) + ".";
    for (const auto& [name, shape] :
         std::vector<std::pair<const char*, std::vector<int64_t>>>{{"ln_1.weight", {C}},
                                                                   {"ln_1.bias", {C}},
                                                                   {"attn.c_attn.weight", {3 * C, C}},
                                                                   {"attn.c_attn.bias", {3 * C}},
                                                                   {"attn.c_proj.weight", {C, C}},
                                                                   {"attn.c_proj.bias", {C}},
                                                                   {"ln_2.weight", {C}},
                                                                   {"ln_2.bias", {C}},
                                                                   {"mlp.c_fc.weight", {4 * C, C}},
                                                                   {"mlp.c_fc.bias", {4 * C}},
                                                                   {"mlp.c_proj.weight", {C, 4 * C}},
                                                                   {"mlp.c_proj.bias", {C}}})
      out.emplace_back(h + name, shape);
  }
  out.push_back({"transformer.ln_f.weight", {C}});
  out.push_back({"transformer.ln_f.bias", {C}});
  return out;
}

int64_t GPT2Config::stored_parameters() const {
  // wte (padded), wpe, per layer 12 C^2 + 13 C (parameter_shapes' layer), ln_f: without listing them.
  const std::string what = "GPT2Config: the parameter count";
  const int64_t C = n_embd();
  const int64_t layer = add_checked(product_checked({12, C, C}, what), product_checked({13, C}, what), what);
  int64_t n = product_checked({n_layer(), layer}, what);
  n = add_checked(n, product_checked({padded_vocab_size(), C}, what), what);
  n = add_checked(n, product_checked({block_size(), C}, what), what);
  return add_checked(n, 2 * C, what);
}

int64_t GPT2Config::num_parameters() const {
  return stored_parameters() - (padded_vocab_size() - vocab_size()) * n_embd();
}

double GPT2Config::flops_per_token(int64_t seq_len) const {
  return 6.0 * double(num_parameters()) + 12.0 * double(n_layer()) * double(n_embd()) * double(seq_len);
}

void GPT2Config::validate() const {
  const auto in_range = [](const char* name, int64_t v, int64_t max) {
    LLMTRAIN_CHECK(v > 0 && v <= max, "GPT2Config: ", name, " must be in [1, ", max, "], got ", v);
  };
  in_range("vocab_size", vocab_size(), kMaxVocab);
  in_range("block_size", block_size(), kMaxBlock);
  in_range("n_layer", n_layer(), kMaxLayers);
  in_range("n_embd", n_embd(), kMaxEmbd);
  in_range("n_head", n_head(), n_embd());
  LLMTRAIN_CHECK(n_embd() % n_head() == 0, "GPT2Config: n_embd ", n_embd(), " is not divisible by n_head ", n_head());
  LLMTRAIN_CHECK(dropout() >= 0.0 && dropout() < 1.0, "GPT2Config: dropout must be in [0, 1), got ", dropout());
  LLMTRAIN_CHECK(layer_norm_eps() > 0.0 && layer_norm_eps() < 1.0, "GPT2Config: layer_norm_eps must be in (0, 1), got ",
                 layer_norm_eps());
  stored_parameters();  // cannot overflow within the limits above; checked all the same
}

}  // namespace llmtrain::nn
