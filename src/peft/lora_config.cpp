#include "llmtrain/peft/lora_config.h"

#include <climits>
#include <cmath>
#include <regex>

#include "../core/json.h"
#include "../core/strings.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"

namespace llmtrain::peft {
namespace {

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
    if (name == t || llmtrain::detail::ends_with(name, "." + t)) return true;
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
  if (c.has("init_lora_weights")) {
    const auto& v = c.at("init_lora_weights");
    if (v.is_boolean()) cfg.init = v.get<bool>() ? LoraInit::kDefault : LoraInit::kRandom;
    else if (v == "gaussian") cfg.init = LoraInit::kGaussian;
    else
      LLMTRAIN_CHECK(false, path, ": init_lora_weights ", json::excerpt(v),
                     " is not supported (true, false or \"gaussian\")");
  }
  if (c.has("base_model_name_or_path") && c.at("base_model_name_or_path").is_string())
    cfg.base_model = c.string("base_model_name_or_path");
  return cfg;
}

std::string lora_config_json(const LoraConfig& cfg, bool gpt2) {
  json::Json j = {{"peft_type", "LORA"},
                  {"task_type", "CAUSAL_LM"},
                  {"r", cfg.r},
                  {"lora_alpha", cfg.lora_alpha},
                  {"lora_dropout", cfg.lora_dropout},
                  {"use_rslora", cfg.use_rslora},
                  {"bias", "none"},
                  {"fan_in_fan_out", gpt2},
                  {"rank_pattern", cfg.rank_pattern},
                  {"alpha_pattern", cfg.alpha_pattern},
                  {"modules_to_save", nullptr},
                  {"base_model_name_or_path", cfg.base_model},
                  {"inference_mode", true}};
  if (!cfg.target_regex.empty()) j["target_modules"] = cfg.target_regex;
  else if (cfg.all_linear) j["target_modules"] = "all-linear";
  else j["target_modules"] = cfg.target_modules;
  if (!cfg.modules_to_save.empty()) j["modules_to_save"] = cfg.modules_to_save;
  switch (cfg.init) {
    case LoraInit::kDefault: j["init_lora_weights"] = true; break;
    case LoraInit::kGaussian: j["init_lora_weights"] = "gaussian"; break;
    case LoraInit::kRandom: j["init_lora_weights"] = false; break;
  }
  return j.dump(2) + "\n";
}

}  // namespace llmtrain::peft
