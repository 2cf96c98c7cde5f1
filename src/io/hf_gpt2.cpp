// Loading goes name by name over llmtrain's parameters, so that every one must be found exactly once;
// what the files hold beyond them (other than the known buffers and the tied head) is an error too.
#include "llmtrain/io/hf_gpt2.h"

#include <nlohmann/json.hpp>

#include <map>
#include <memory>
#include <set>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/io/safetensors.h"

namespace llmtrain::io {
namespace {

using Json = nlohmann::json;

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Hugging Face's Conv1D layers: weights stored (in, out).
bool conv1d(const std::string& name) {
  for (const char* s : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (ends_with(name, s)) return true;
  return false;
}

Json read_json(const std::string& path) {
  try {
    return Json::parse(fs::read_file(path));
  } catch (const Json::exception& e) {
    LLMTRAIN_CHECK(false, path, ": not valid JSON (", e.what(), ")");
  }
  return {};
}

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

// The folder's tensors by name (prefix "transformer." added where missing), each with the file it is in.
struct Weights {
  std::vector<std::unique_ptr<SafetensorsFile>> files;
  std::map<std::string, std::pair<const SafetensorsFile*, std::string>> by_name;  // ours -> (file, key in file)

  explicit Weights(const std::string& dir) {
    std::vector<std::string> paths;
    const std::string index = dir + "/model.safetensors.index.json";
    if (fs::exists(dir + "/model.safetensors")) {
      paths.push_back(dir + "/model.safetensors");
    } else {
      const Json j = read_json(index);
      LLMTRAIN_CHECK(j.contains("weight_map") && j["weight_map"].is_object(), index, ": no weight_map object");
      std::set<std::string> shards;
      for (const auto& [name, shard] : j["weight_map"].items()) {
        LLMTRAIN_CHECK(shard.is_string(), index, ": weight_map[", name, "] is not a file name");
        shards.insert(shard.get<std::string>());
      }
      for (const auto& s : shards) {
        LLMTRAIN_CHECK(s.find('/') == std::string::npos, index, ": shard ", s, " is not a file in the folder");
        LLMTRAIN_CHECK(fs::exists(dir + "/" + s), index, " names shard ", s, ", which ", dir, " does not hold");
        paths.push_back(dir + "/" + s);
      }
    }
    for (const auto& p : paths) {
      files.push_back(std::make_unique<SafetensorsFile>(p));
      for (const auto& key : files.back()->names()) {
        const std::string name = key.rfind("transformer.", 0) == 0 || key.rfind("lm_head.", 0) == 0 ? key
                                                                                                    : "transformer." + key;
        const auto [it, fresh] = by_name.emplace(name, std::make_pair(files.back().get(), key));
        LLMTRAIN_CHECK(fresh, "Hugging Face folder ", dir, ": tensor ", name, " is in both ", it->second.first->path(),
                       " and ", p);
      }
    }
  }
};

}  // namespace

bool is_hf_dir(const std::string& dir) {
  return fs::exists(dir + "/config.json") &&
         (fs::exists(dir + "/model.safetensors") || fs::exists(dir + "/model.safetensors.index.json"));
}

nn::GPT2Config hf_gpt2_config(const std::string& dir) {
  const std::string path = dir + "/config.json";
  LLMTRAIN_CHECK(fs::exists(path), "Hugging Face folder ", dir, ": no config.json");
  const Json j = read_json(path);
  LLMTRAIN_CHECK(j.is_object(), path, ": expected a JSON object");
  const std::string type = j.value("model_type", "");
  LLMTRAIN_CHECK(type == "gpt2", path, ": model_type ", type.empty() ? "(missing)" : type,
                 " is not supported (only gpt2)");
  const auto integer = [&](const char* key) {
    LLMTRAIN_CHECK(j.contains(key) && j[key].is_number_integer() && j[key].get<int64_t>() > 0, path, ": ", key,
                   " must be a positive integer, got ", j.contains(key) ? j[key].dump() : "nothing");
    return j[key].get<int64_t>();
  };
  nn::GPT2Config cfg;
  cfg.vocab_size(integer("vocab_size"))
      .block_size(integer("n_positions"))
      .n_layer(integer("n_layer"))
      .n_head(integer("n_head"))
      .n_embd(integer("n_embd"))
      .dropout(0.0);
  if (j.contains("layer_norm_epsilon")) {
    LLMTRAIN_CHECK(j["layer_norm_epsilon"].is_number(), path, ": layer_norm_epsilon must be a number");
    cfg.layer_norm_eps(j["layer_norm_epsilon"].get<double>());
  }
  const std::string act = j.value("activation_function", "gelu_new");
  LLMTRAIN_CHECK(act == "gelu_new" || act == "gelu_pytorch_tanh", path, ": activation_function ", act,
                 " is not supported (GPT-2's gelu_new, the tanh approximation)");
  if (j.contains("n_inner") && !j["n_inner"].is_null())
    LLMTRAIN_CHECK(j["n_inner"].is_number_integer() && j["n_inner"].get<int64_t>() == 4 * cfg.n_embd(), path,
                   ": n_inner ", j["n_inner"].dump(), " is not supported (4 * n_embd = ", 4 * cfg.n_embd(), ")");
  LLMTRAIN_CHECK(j.value("tie_word_embeddings", true), path, ": tie_word_embeddings false is not supported (llmtrain ",
                 "ties the head to wte)");
  cfg.validate();
  return cfg;
}

nn::GPT2 load_hf_gpt2(const std::string& dir) {
  const nn::GPT2Config cfg = hf_gpt2_config(dir);
  nn::GPT2 model(cfg);
  Weights w(dir);
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  for (auto& p : model->named_parameters()) {
    const std::string& name = p.key();
    const auto it = w.by_name.find(name);
    LLMTRAIN_CHECK(it != w.by_name.end(), "Hugging Face folder ", dir, ": no tensor ", name, " (nor without its ",
                   "transformer. prefix)");
    const auto& [file, key] = it->second;
    torch::Tensor t = file->get(key);
    if (conv1d(name) && t.dim() == 2) t = t.t();
    torch::Tensor dst = p.value();
    if (name == "transformer.wte.weight") {
      dst = dst.narrow(0, 0, cfg.vocab_size());
      p.value().narrow(0, cfg.vocab_size(), cfg.padded_vocab_size() - cfg.vocab_size()).zero_();
    }
    LLMTRAIN_CHECK(t.sizes() == dst.sizes(), "tensor ", key, " in ", file->path(), " has shape ", shape_str(t.sizes()),
                   conv1d(name) ? " (as (out, in))" : "", "; config.json's model needs ", shape_str(dst.sizes()));
    dst.copy_(t);
    used.insert(name);
  }
  for (const auto& [name, where] : w.by_name) {
    if (used.count(name) || ends_with(name, ".attn.bias") || ends_with(name, ".attn.masked_bias")) continue;
    if (name == "lm_head.weight") {
      const torch::Tensor head = where.first->get(where.second).to(torch::kFloat);
      const torch::Tensor wte = model->transformer->wte->weight.narrow(0, 0, cfg.vocab_size());
      LLMTRAIN_CHECK(head.sizes() == wte.sizes() && torch::equal(head, wte), "tensor lm_head.weight in ",
                     where.first->path(), " differs from transformer.wte.weight; llmtrain ties the head to wte");
      continue;
    }
    LLMTRAIN_CHECK(false, "tensor ", where.second, " in ", where.first->path(), " is not part of GPT-2");
  }
  return model;
}

void save_hf_gpt2(nn::GPT2& model, const std::string& dir) {
  const nn::GPT2Config& cfg = model->cfg;
  const int64_t V = cfg.vocab_size();
  std::vector<std::pair<std::string, torch::Tensor>> tensors;
  torch::ScalarType dtype = torch::kFloat;
  for (const auto& p : model->named_parameters()) {
    torch::Tensor t = p.value().detach();
    dtype = t.scalar_type();
    if (p.key() == "transformer.wte.weight") t = t.narrow(0, 0, V);
    if (conv1d(p.key())) t = t.t();
    tensors.emplace_back(p.key(), t);
  }
  const int64_t eos = V == 50257 ? 50256 : V - 1;
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
                       {"torch_dtype", dtype == torch::kBFloat16 ? "bfloat16" : dtype == torch::kHalf ? "float16"
                                                                                                        : "float32"}};
  fs::write_dir_atomic(dir, [&](const std::string& tmp) {
    save_safetensors(tmp + "/model.safetensors", tensors, {{"format", "pt"}});
    fs::write_file_atomic(tmp + "/config.json", config.dump(2) + "\n");
  });
}

}  // namespace llmtrain::io
