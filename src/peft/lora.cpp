#include "llmtrain/peft/lora.h"

#include <torch/torch.h>

#include <climits>
#include <cmath>
#include <regex>
#include <set>

#include "../core/json.h"
#include "../io/hf_weights.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/io/safetensors.h"

namespace llmtrain::peft {
namespace {

using io::detail::ends_with;
using io::detail::shape_str;

constexpr const char* kPrefix = "base_model.model.";  // PEFT's keys: the PeftModel's path to the base

// PEFT's pattern lookup (rank_pattern, alpha_pattern): a key matches the layer it names or ends.
template <typename V>
const V* pattern_value(const std::map<std::string, V>& patterns, const std::string& name) {
  for (const auto& [key, value] : patterns)
    if (key == name || std::regex_match(name, std::regex("(.*\\.)?(" + key + ")"))) return &value;
  return nullptr;
}

std::vector<std::string> strings(const json::Object& c, const std::string& key) {
  std::vector<std::string> out;
  const auto& v = c.at(key);
  LLMTRAIN_CHECK(v.is_array(), c.where(), ": ", key, " must be a list of names, got ", json::excerpt(v));
  for (const auto& s : v) {
    LLMTRAIN_CHECK(s.is_string(), c.where(), ": ", key, " must be a list of names, got ", json::excerpt(v));
    out.push_back(s.get<std::string>());
  }
  return out;
}

}  // namespace

bool LoraConfig::targets(const std::string& name, bool is_output_head) const {
  if (!target_regex.empty()) return std::regex_match(name, std::regex(target_regex));
  if (all_linear) return !is_output_head;
  for (const auto& t : target_modules)
    if (name == t || ends_with(name, "." + t)) return true;
  return false;
}

int64_t LoraConfig::rank_of(const std::string& name) const {
  const int64_t* v = pattern_value(rank_pattern, name);
  return v != nullptr ? *v : r;
}

double LoraConfig::scaling_of(const std::string& name) const {
  const double* a = pattern_value(alpha_pattern, name);
  const double alpha = a != nullptr ? *a : lora_alpha, rank = double(rank_of(name));
  return use_rslora ? alpha / std::sqrt(rank) : alpha / rank;
}

LoraConfig read_lora_config(const std::string& dir) {
  const std::string path = dir + "/adapter_config.json";
  LLMTRAIN_CHECK(fs::exists(path), "PEFT adapter folder ", dir, ": no adapter_config.json");
  const json::Json j = json::parse_file(path);
  const json::Object c(j, path);
  const std::string type = c.has("peft_type") ? c.string("peft_type") : "";
  LLMTRAIN_CHECK(type == "LORA", path, ": peft_type ", type.empty() ? "(missing)" : type,
                 " is not supported (only LORA)");
  // Options that change what the adapter computes, refused unless off.
  const auto off = [&](const char* key) {
    if (!c.has(key)) return;
    const auto& v = c.at(key);
    const bool is_off = v.is_null() || (v.is_boolean() && !v.get<bool>()) || (v.is_string() && v == "none") ||
                        ((v.is_array() || v.is_object()) && v.empty());
    LLMTRAIN_CHECK(is_off, path, ": ", key, " ", json::excerpt(v), " is not supported");
  };
  for (const char* key : {"use_dora", "lora_bias", "layers_to_transform", "layers_pattern", "layer_replication",
                          "target_parameters", "trainable_token_indices", "use_qalora", "alora_invocation_tokens",
                          "exclude_modules", "megatron_config", "use_bdlora"})
    off(key);
  if (c.has("bias"))
    LLMTRAIN_CHECK(c.string("bias") == "none", path, ": bias ", c.string("bias"),
                   " is not supported (only none: LoRA trains no biases)");
  LoraConfig cfg;
  cfg.r = c.integer("r", 1, INT32_MAX);
  cfg.lora_alpha = c.has("lora_alpha") ? c.number("lora_alpha", -1e9, 1e9) : double(cfg.r);
  if (c.has("lora_dropout")) cfg.lora_dropout = c.number("lora_dropout", 0, 0.999999);
  if (c.has("use_rslora")) cfg.use_rslora = c.boolean("use_rslora");
  const auto& targets = c.at("target_modules");
  if (targets.is_string()) {
    const std::string t = targets.get<std::string>();
    if (t == "all-linear") {
      cfg.all_linear = true;
    } else {
      try {
        std::regex check(t);
      } catch (const std::regex_error&) {
        LLMTRAIN_CHECK(false, path, ": target_modules ", json::excerpt(targets), " is not a regular expression");
      }
      cfg.target_regex = t;
    }
  } else {
    cfg.target_modules = strings(c, "target_modules");
    LLMTRAIN_CHECK(!cfg.target_modules.empty(), path, ": target_modules is empty");
  }
  const auto each_pattern = [&](const char* key, const auto& take) {  // take(object, pattern) for every entry
    if (!c.has(key) || c.at(key).is_null()) return;
    const json::Object patterns = c.object(key);
    for (const auto& item : patterns.value().items()) take(patterns, item.key());
  };
  each_pattern("rank_pattern",
               [&](const json::Object& o, const std::string& k) { cfg.rank_pattern[k] = o.integer(k, 1, INT32_MAX); });
  each_pattern("alpha_pattern",
               [&](const json::Object& o, const std::string& k) { cfg.alpha_pattern[k] = o.number(k, -1e9, 1e9); });
  if (c.has("modules_to_save") && !c.at("modules_to_save").is_null())
    cfg.modules_to_save = strings(c, "modules_to_save");
  if (c.has("base_model_name_or_path") && c.at("base_model_name_or_path").is_string())
    cfg.base_model = c.string("base_model_name_or_path");
  return cfg;
}

std::vector<std::string> merge_lora(nn::CausalLM& model, const std::string& dir) {
  const LoraConfig cfg = read_lora_config(dir);
  const std::string file_path = dir + "/adapter_model.safetensors";
  LLMTRAIN_CHECK(fs::exists(file_path), "PEFT adapter folder ", dir,
                 ": no adapter_model.safetensors (PEFT's older adapter_model.bin is not read)");
  const io::SafetensorsFile file(file_path);
  torch::nn::Module& m = model.module();
  const bool gpt2 = model.spec().is_gpt2();

  // The file's tensors: LoRA pairs by layer, and whole parameters of modules_to_save.
  std::map<std::string, std::pair<std::string, std::string>> pairs;  // layer -> (A key, B key)
  std::vector<std::pair<std::string, std::string>> saved;            // (parameter, key)
  for (const auto& key : file.names()) {
    LLMTRAIN_CHECK(key.rfind(kPrefix, 0) == 0, file_path, ": tensor ", key, " does not start with ", kPrefix);
    const std::string name = key.substr(std::string(kPrefix).size());
    LLMTRAIN_CHECK(
        name.find(".lora_embedding_") == std::string::npos && name.find(".lora_magnitude_") == std::string::npos,
        file_path, ": tensor ", key, " is not supported (LoRA on embeddings, DoRA)");
    const std::string a = ".lora_A.weight", b = ".lora_B.weight";  // the same length: the layer is what precedes
    if (ends_with(name, a)) pairs[name.substr(0, name.size() - a.size())].first = key;
    else if (ends_with(name, b)) pairs[name.substr(0, name.size() - b.size())].second = key;
    else saved.emplace_back(name, key);
  }

  // Every check first: nothing changes unless the whole adapter fits the model.
  const auto layers = m.named_modules(/*name_prefix=*/"", /*include_self=*/false);
  std::set<std::string> targeted;
  for (const auto& item : layers) {
    if (item.value()->as<torch::nn::Linear>() == nullptr) continue;
    if (cfg.targets(item.key(), item.key() == "lm_head")) targeted.insert(item.key());
  }
  LLMTRAIN_CHECK(!targeted.empty(), dir, "/adapter_config.json: target_modules match no linear layer of the ",
                 model.spec().family(), " model");
  for (const auto& layer : targeted)
    LLMTRAIN_CHECK(pairs.count(layer) != 0, file_path, ": no lora_A and lora_B for the targeted layer ", layer);
  struct Update {
    std::string layer;
    torch::Tensor weight, a, b;
    double scaling;
  };
  std::vector<Update> updates;
  for (const auto& [layer, keys] : pairs) {
    LLMTRAIN_CHECK(!keys.first.empty() && !keys.second.empty(), file_path, ": layer ", layer, " has ",
                   keys.first.empty() ? "lora_B but no lora_A" : "lora_A but no lora_B");
    const auto* lin = layers.find(layer);
    LLMTRAIN_CHECK(lin != nullptr && (*lin)->as<torch::nn::Linear>() != nullptr, file_path, ": layer ", layer,
                   " is not a linear layer of the ", model.spec().family(), " model (an adapter for another base?)");
    LLMTRAIN_CHECK(targeted.count(layer) != 0, file_path, ": layer ", layer,
                   " is not among adapter_config.json's target_modules");
    const torch::Tensor w = (*lin)->as<torch::nn::Linear>()->weight;  // (out, in)
    const torch::Tensor a = file.get(keys.first), b = file.get(keys.second);
    const int64_t r = cfg.rank_of(layer);
    LLMTRAIN_CHECK(a.dim() == 2 && b.dim() == 2 && a.size(0) == r && a.size(1) == w.size(1) && b.size(0) == w.size(0) &&
                       b.size(1) == r,
                   file_path, ": layer ", layer, " has lora_A ", shape_str(a.sizes()), " and lora_B ",
                   shape_str(b.sizes()), "; its weight ", shape_str(w.sizes()), " and r ", r, " need lora_A [", r, ", ",
                   w.size(1), "] and lora_B [", w.size(0), ", ", r, "]");
    updates.push_back({layer, w, a, b, cfg.scaling_of(layer)});
  }
  const auto params = m.named_parameters();
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (parameter, value)
  for (const auto& [name, key] : saved) {
    const auto* p = params.find(name);
    LLMTRAIN_CHECK(p != nullptr, file_path, ": tensor ", key, " (of modules_to_save) has no parameter ", name,
                   " in the ", model.spec().family(), " model");
    torch::Tensor v = file.get(key);
    if (gpt2 && io::detail::hf_gpt2_conv1d(name) && v.dim() == 2) v = v.t();  // stored (in, out)
    LLMTRAIN_CHECK(v.sizes() == p->sizes(), file_path, ": tensor ", key, " has shape ", shape_str(v.sizes()),
                   "; the model's ", name, " is ", shape_str(p->sizes()));
    copies.emplace_back(*p, v);
  }

  torch::NoGradGuard no_grad;
  std::vector<std::string> merged;
  for (const auto& u : updates) {  // in float64, rounded once to the weight's dtype
    const auto d = torch::kDouble;
    const torch::Tensor delta = torch::matmul(u.b.to(d), u.a.to(d)).mul_(u.scaling);
    u.weight.copy_(u.weight.to(torch::kCPU, d).add_(delta).to(u.weight.device(), u.weight.scalar_type()));
    merged.push_back(u.layer);
  }
  for (auto& [p, v] : copies) p.copy_(v);
  return merged;
}

}  // namespace llmtrain::peft
