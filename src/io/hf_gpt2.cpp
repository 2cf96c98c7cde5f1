// Loading goes name by name over llmtrain's parameters, so that every one must be found exactly once;
// what the files hold beyond them (other than the known buffers and the tied head) is an error too.
#include "llmtrain/io/hf_gpt2.h"

#include <map>
#include <memory>
#include <set>

#include "../core/json.h"
#include "../core/strings.h"
#include "hf_config.h"
#include "hf_weights.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/io/safetensors.h"

namespace llmtrain::io {
namespace {

using detail::hf_gpt2_conv1d;
using detail::HfWeights;
using detail::shape_str;
using llmtrain::detail::ends_with;

using Json = json::Json;

}  // namespace

bool is_hf_dir(const std::string& dir) {
  return fs::exists(dir + "/config.json") &&
         (fs::exists(dir + "/model.safetensors") || fs::exists(dir + "/model.safetensors.index.json"));
}

nn::GPT2Config hf_gpt2_config(const std::string& dir) {
  std::string path;
  const std::string text = detail::read_hf_config(dir, &path);
  return detail::parse_hf_gpt2_config(text, path);
}

nn::GPT2 load_hf_gpt2(const std::string& dir) {
  const nn::GPT2Config cfg = hf_gpt2_config(dir);
  const HfWeights w(dir, [](const std::string& key) {
    return key.rfind("transformer.", 0) == 0 || key.rfind("lm_head.", 0) == 0 ? key : "transformer." + key;
  });
  // config.json's shape decides what is allocated: every tensor is found and checked first.
  for (auto [name, shape] : cfg.parameter_shapes()) {
    const auto it = w.by_name.find(name);
    LLMTRAIN_CHECK(it != w.by_name.end(), "Hugging Face folder ", dir, ": no tensor ", name, " (nor without its ",
                   "transformer. prefix)");
    const auto& [file, key] = it->second;
    if (name == "transformer.wte.weight") shape[0] = cfg.vocab_size();  // padded inside llmtrain, not in the file
    if (hf_gpt2_conv1d(name)) std::swap(shape[0], shape[1]);
    const auto have = file->shape(key);
    LLMTRAIN_CHECK(have == shape, "tensor ", key, " in ", file->path(), " has shape ", shape_str(have),
                   "; config.json's model needs ", shape_str(shape));
  }
  std::set<std::string> used;
  for (const auto& [name, shape] : cfg.parameter_shapes()) used.insert(name);
  for (const auto& [name, where] : w.by_name)
    LLMTRAIN_CHECK(used.count(name) || name == "lm_head.weight" || ends_with(name, ".attn.bias") ||
                       ends_with(name, ".attn.masked_bias"),
                   "tensor ", where.second, " in ", where.first->path(), " is not part of GPT-2");
  nn::GPT2 model(cfg);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    const auto& [file, key] = w.by_name.at(p.key());
    torch::Tensor t = file->get(key);
    if (hf_gpt2_conv1d(p.key())) t = t.t();
    torch::Tensor dst = p.value();
    if (p.key() == "transformer.wte.weight") {
      dst = dst.narrow(0, 0, cfg.vocab_size());
      p.value().narrow(0, cfg.vocab_size(), cfg.padded_vocab_size() - cfg.vocab_size()).zero_();
    }
    dst.copy_(t);
  }
  if (const auto head = w.by_name.find("lm_head.weight"); head != w.by_name.end()) {
    const torch::Tensor t = head->second.first->get(head->second.second).to(torch::kFloat);
    const torch::Tensor wte = model->transformer->wte->weight.narrow(0, 0, cfg.vocab_size());
    LLMTRAIN_CHECK(t.sizes() == wte.sizes() && torch::equal(t, wte), "tensor lm_head.weight in ",
                   head->second.first->path(), " differs from transformer.wte.weight; llmtrain ties the head to wte");
  }
  return model;
}

void save_hf_gpt2(nn::GPT2& model, const std::string& dir, const fs::OutputOptions& options, const HfExtras& extras) {
  const nn::GPT2Config& cfg = model->cfg;
  const int64_t V = cfg.vocab_size();
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  torch::ScalarType dtype = torch::kFloat;
  for (const auto& p : model->named_parameters()) {
    torch::Tensor t = p.value().detach();
    dtype = t.scalar_type();
    if (p.key() == "transformer.wte.weight") t = t.narrow(0, 0, V);
    if (hf_gpt2_conv1d(p.key())) t = t.t();
    tensors.emplace_back(p.key(), t);
  }
  const auto id = [&](const std::optional<int64_t>& given) {
    return given ? Json(*given) : V == 50257 ? Json(50256) : Json(nullptr);
  };
  const Json bos = id(extras.bos_id), eos = id(extras.eos_id);
  const Json config = {{"architectures", {"GPT2LMHeadModel"}},
                       {"model_type", "gpt2"},
                       {"vocab_size", V},
                       {"n_positions", cfg.block_size()},
                       {"n_ctx", cfg.block_size()},
                       {"n_embd", cfg.n_embd()},
                       {"n_layer", cfg.n_layer()},
                       {"n_head", cfg.n_head()},
                       {"n_inner", nullptr},
                       {"activation_function", "gelu_new"},
                       {"resid_pdrop", cfg.dropout()},
                       {"embd_pdrop", cfg.dropout()},
                       {"attn_pdrop", cfg.dropout()},
                       {"layer_norm_epsilon", cfg.layer_norm_eps()},
                       {"initializer_range", 0.02},
                       {"bos_token_id", eos},
                       {"eos_token_id", eos},
                       {"tie_word_embeddings", true},
                       {"torch_dtype", dtype == torch::kBFloat16 ? "bfloat16"
                                       : dtype == torch::kHalf   ? "float16"
                                                                 : "float32"}};
  fs::write_dir_atomic(dir, "hf-gpt2", options, [&](const std::string& tmp) {
    detail::save_hf_weights(tmp, tensors);
    fs::write_file_atomic(tmp + "/config.json", config.dump(2) + "\n");
    const Json generation = {{"bos_token_id", bos}, {"eos_token_id", eos}, {"pad_token_id", eos}};
    fs::write_file_atomic(tmp + "/generation_config.json", generation.dump(2) + "\n");
    if (extras.write) extras.write(tmp);
  });
}

}  // namespace llmtrain::io
