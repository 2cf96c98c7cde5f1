// Loading goes name by name over llmtrain's parameters (their names are Hugging Face's), so that every
// one must be found exactly once; what the files hold beyond them is an error too, but for the rotary
// inverse frequencies older exports saved (recomputed from config.json) and a tied head's copy.
#include "llmtrain/io/hf_llama.h"

#include <set>

#include "../core/json.h"
#include "../core/strings.h"
#include "hf_config.h"
#include "hf_weights.h"
#include "llmtrain/core/error.h"

namespace llmtrain::io {

nn::LlamaConfig hf_llama_config(const std::string& dir) {
  std::string path;
  const std::string text = detail::read_hf_config(dir, &path);
  return detail::parse_hf_llama_config(text, path);
}

nn::Llama load_hf_llama(const std::string& dir) {
  const nn::LlamaConfig cfg = hf_llama_config(dir);
  const detail::HfWeights w(dir, [](const std::string& key) { return key; });
  // config.json's shape decides what is allocated: every tensor is found and checked first.
  std::set<std::string> used;
  for (const auto& [name, shape] : cfg.parameter_shapes()) {
    const auto it = w.by_name.find(name);
    LLMTRAIN_CHECK(it != w.by_name.end(), "Hugging Face folder ", dir, ": no tensor ", name);
    const auto& [file, key] = it->second;
    const auto have = file->shape(key);
    LLMTRAIN_CHECK(have == shape, "tensor ", key, " in ", file->path(), " has shape ", detail::shape_str(have),
                   "; config.json's model needs ", detail::shape_str(shape));
    used.insert(name);
  }
  const bool tied_copy = cfg.tie_word_embeddings() && w.by_name.count("lm_head.weight");
  for (const auto& [name, where] : w.by_name)
    LLMTRAIN_CHECK(used.count(name) || llmtrain::detail::ends_with(name, ".rotary_emb.inv_freq") ||
                       (tied_copy && name == "lm_head.weight"),
                   "tensor ", where.second, " in ", where.first->path(), " is not part of this ", cfg.family(),
                   " model");
  nn::Llama model(cfg);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    const auto& [file, key] = w.by_name.at(p.key());
    p.value().copy_(file->get(key));
  }
  if (tied_copy) {
    const auto& [file, key] = w.by_name.at("lm_head.weight");
    LLMTRAIN_CHECK(torch::equal(file->get(key).to(torch::kFloat), model->model->embed_tokens->weight), "tensor ", key,
                   " in ", file->path(), " differs from model.embed_tokens.weight, but config.json ties them");
  }
  return model;
}

void save_hf_llama(nn::Llama& model, const std::string& dir, const fs::OutputOptions& options, const HfExtras& extras) {
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  torch::ScalarType dtype = torch::kFloat;
  for (const auto& p : model->named_parameters()) {
    tensors.emplace_back(p.key(), p.value().detach());
    dtype = p.value().scalar_type();
  }
  const std::string dtype_name = dtype == torch::kBFloat16 ? "bfloat16" : dtype == torch::kHalf ? "float16" : "float32";
  const int64_t bos = extras.bos_id.value_or(-1), eos = extras.eos_id.value_or(-1);
  const std::string config = detail::hf_llama_config_json(model->cfg, dtype_name, bos, eos);
  const auto id = [](int64_t v) { return v >= 0 ? json::Json(v) : json::Json(nullptr); };
  const json::Json generation = {{"bos_token_id", id(bos)}, {"eos_token_id", id(eos)}};
  fs::write_dir_atomic(dir, "hf-llama", options, [&](const std::string& tmp) {
    detail::save_hf_weights(tmp, tensors);
    fs::write_file_atomic(tmp + "/config.json", config);
    fs::write_file_atomic(tmp + "/generation_config.json", generation.dump(2) + "\n");
    if (extras.write) extras.write(tmp);
  });
}

}  // namespace llmtrain::io
