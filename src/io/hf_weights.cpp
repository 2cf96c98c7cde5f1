#include "hf_weights.h"

#include <cstdio>
#include <set>

#include "../core/json.h"
#include "../core/strings.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"

namespace llmtrain::io::detail {

bool hf_gpt2_conv1d(const std::string& name) {
  for (const char* s : {".attn.c_attn.weight", ".attn.c_proj.weight", ".mlp.c_fc.weight", ".mlp.c_proj.weight"})
    if (llmtrain::detail::ends_with(name, s)) return true;
  return false;
}

std::string read_hf_config(const std::string& dir, std::string* path) {
  *path = dir + "/config.json";
  LLMTRAIN_CHECK(fs::exists(*path), "Hugging Face folder ", dir, ": no config.json");
  return fs::read_file(*path, uint64_t(16) << 20);
}

std::string shape_str(at::IntArrayRef s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) out += (i ? ", " : "") + std::to_string(s[i]);
  return out + "]";
}

HfWeights::HfWeights(const std::string& dir, const std::function<std::string(const std::string&)>& rename) {
  std::vector<std::string> paths;
  const std::string index = dir + "/model.safetensors.index.json";
  if (fs::exists(dir + "/model.safetensors")) {
    paths.push_back(dir + "/model.safetensors");
  } else {
    const json::Json j = json::parse_file(index, uint64_t(256) << 20);
    const json::Object map = json::Object(j, index).object("weight_map");
    std::set<std::string> shards;
    for (const auto& [name, shard] : map.value().items()) shards.insert(map.string(name));
    for (const auto& s : shards) {
      LLMTRAIN_CHECK(!s.empty() && s.find('/') == std::string::npos && s != "." && s != "..", index, ": shard \"", s,
                     "\" is not a file name in the folder");
      LLMTRAIN_CHECK(fs::exists(dir + "/" + s), index, " names shard ", s, ", which ", dir, " does not hold");
      paths.push_back(dir + "/" + s);
    }
  }
  for (const auto& p : paths) {
    files.push_back(std::make_unique<SafetensorsFile>(p));
    for (const auto& key : files.back()->names()) {
      const std::string name = rename(key);
      const auto [it, fresh] = by_name.emplace(name, std::make_pair(files.back().get(), key));
      LLMTRAIN_CHECK(fresh, "Hugging Face folder ", dir, ": tensor ", name, " is in both ", it->second.first->path(),
                     " and ", p);
    }
  }
}

void save_hf_weights(const std::string& tmp, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                     int64_t shard_bytes) {
  std::vector<std::vector<std::pair<std::string, torch::Tensor>>> shards(1);
  int64_t in_shard = 0, total = 0;
  for (const auto& named : tensors) {
    const int64_t bytes = int64_t(named.second.nbytes());
    if (in_shard > 0 && in_shard + bytes > shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(named);
    in_shard += bytes, total += bytes;
  }
  if (shards.size() == 1) return save_safetensors(tmp + "/model.safetensors", tensors, {{"format", "pt"}});
  json::Json map = json::Json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    save_safetensors(tmp + "/" + name, shards[i], {{"format", "pt"}});
    for (const auto& named : shards[i]) map[named.first] = name;
  }
  const json::Json index = {{"metadata", {{"total_size", total}}}, {"weight_map", map}};
  fs::write_file_atomic(tmp + "/model.safetensors.index.json", index.dump(2) + "\n");
}

}  // namespace llmtrain::io::detail
