#include "llmtrain/peft/lora.h"

#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>

#include "../core/strings.h"
#include "../io/hf_weights.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/io/safetensors.h"

namespace llmtrain::peft {
namespace {

using io::detail::shape_str;
using llmtrain::detail::ends_with;

constexpr const char* kPrefix = "base_model.model.";  // PEFT's keys: the PeftModel's path to the base

}  // namespace

// ---- LoraAdapter --------------------------------------------------------------------------------

LoraAdapterImpl::LoraAdapterImpl(int64_t in, int64_t out, int64_t r, double scaling_, double dropout_, LoraInit init)
    : scaling(scaling_), dropout(dropout_) {
  // torch::nn::Linear starts as PEFT's nn.Linear does: uniform within 1/sqrt(in).
  lora_A = register_module("lora_A", torch::nn::Linear(torch::nn::LinearOptions(in, r).bias(false)));
  lora_B = register_module("lora_B", torch::nn::Linear(torch::nn::LinearOptions(r, out).bias(false)));
  torch::NoGradGuard no_grad;
  if (init == LoraInit::kGaussian) lora_A->weight.normal_(0.0, 1.0 / double(r));
  if (init != LoraInit::kRandom) lora_B->weight.zero_();
}

torch::Tensor LoraAdapterImpl::add_to(const torch::Tensor& y, const torch::Tensor& x) {
  const torch::Tensor in = dropout > 0 && is_training() ? torch::dropout(x, dropout, true) : x;
  // The scaling on the rank-r side and the add as B's product's accumulate (addmm, beta 1): no
  // elementwise pass over the layer's output forward or backward.
  const torch::Tensor h = nn::linear(lora_A, in) * scaling;
  const int64_t out = y.size(-1), r = h.size(-1);
  return at::addmm(y.reshape({-1, out}), h.reshape({-1, r}), lora_B->weight.t()).view(y.sizes());
}

namespace {

// The model's own linear layers, not the adapters' (lora_A and lora_B are linear layers too).
bool base_layer(const std::string& name) {
  return name.find(std::string(".") + nn::kAdapterName + ".") == std::string::npos;
}

struct Target {
  std::string name;
  torch::nn::Linear layer;
};

// The linear layers `cfg` targets, each checked: no adapter yet, a rank the layer can hold.
std::vector<Target> targets_of(nn::CausalLM& model, const LoraConfig& cfg, const std::string& source) {
  std::vector<Target> out;
  for (const auto& item : model.module().named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    auto* lin = item.value()->as<torch::nn::Linear>();
    if (lin == nullptr || !base_layer(item.key()) || !cfg.targets(item.key(), item.key() == "lm_head")) continue;
    torch::nn::Linear layer(std::dynamic_pointer_cast<torch::nn::LinearImpl>(item.value()));
    LLMTRAIN_CHECK(nn::adapter_of(*layer) == nullptr, source, ": layer ", item.key(), " has an adapter already");
    const int64_t r = cfg.rank_of(item.key()), in = layer->options.in_features(), out_f = layer->options.out_features();
    LLMTRAIN_CHECK(r <= std::min(in, out_f), source, ": r ", r, " is larger than layer ", item.key(), " (", out_f,
                   " x ", in, "): at most ", std::min(in, out_f));
    out.push_back({item.key(), layer});
  }
  LLMTRAIN_CHECK(!out.empty(), source, ": target_modules match no linear layer of the ", model.spec().family(),
                 " model");
  return out;
}

// The parameters of modules_to_save, by their full names; a name matching no module is an error.
std::vector<std::pair<std::string, torch::Tensor>> saved_params(nn::CausalLM& model, const LoraConfig& cfg,
                                                                const std::string& source) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  const auto modules = model.module().named_modules(/*name_prefix=*/"", /*include_self=*/false);
  for (const auto& want : cfg.modules_to_save) {
    bool found = false;
    for (const auto& item : modules) {
      if (item.key() != want && !ends_with(item.key(), "." + want)) continue;
      found = true;
      for (const auto& p : item.value()->named_parameters(/*recurse=*/true))
        out.emplace_back(item.key() + "." + p.key(), p.value());
    }
    LLMTRAIN_CHECK(found, source, ": modules_to_save names ", want, ", which is no module of the ",
                   model.spec().family(), " model");
  }
  return out;
}

// The base frozen: only the adapters and the modules to save keep a gradient.
void freeze_base(nn::CausalLM& model, const std::vector<std::pair<std::string, torch::Tensor>>& saved) {
  for (auto& p : model.module().parameters()) p.set_requires_grad(false);
  for (const auto& item : model.module().named_modules(/*name_prefix=*/"", /*include_self=*/false))
    if (dynamic_cast<LoraAdapterImpl*>(item.value().get()) != nullptr)
      for (auto& p : item.value()->parameters()) p.set_requires_grad(true);
  for (const auto& [name, p] : saved) p.set_requires_grad(true);
}

void attach(const Target& t, const LoraConfig& cfg, const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor& w = t.layer->weight;
  auto adapter =
      std::make_shared<LoraAdapterImpl>(t.layer->options.in_features(), t.layer->options.out_features(),
                                        cfg.rank_of(t.name), cfg.scaling_of(t.name), cfg.lora_dropout, cfg.init);
  adapter->to(w.device(), w.scalar_type());
  if (a.defined()) {
    torch::NoGradGuard no_grad;
    adapter->lora_A->weight.copy_(a);
    adapter->lora_B->weight.copy_(b);
  }
  t.layer.ptr()->register_module(nn::kAdapterName, std::shared_ptr<nn::LinearAdapterImpl>(adapter));
}

// GPT-2's Conv1D layers keep 2-D weights as (in, out) in Hugging Face's files.
bool transposed_in_files(const nn::CausalLM& model, const std::string& name, const torch::Tensor& v) {
  return model.spec().is_gpt2() && io::detail::hf_gpt2_conv1d(name) && v.dim() == 2;
}

// File tensor `key`, the value of the model's parameter `p` (`name`, of modules_to_save), in the
// model's layout; its shape checked.
torch::Tensor saved_value(const nn::CausalLM& model, const io::SafetensorsFile& file, const std::string& key,
                          const std::string& name, const torch::Tensor& p) {
  torch::Tensor v = file.get(key);
  if (transposed_in_files(model, name, v)) v = v.t();
  LLMTRAIN_CHECK(v.sizes() == p.sizes(), file.path(), ": tensor ", key, " has shape ", shape_str(v.sizes()),
                 "; the model's ", name, " is ", shape_str(p.sizes()));
  return v;
}

}  // namespace

std::vector<std::string> add_lora(nn::CausalLM& model, const LoraConfig& cfg) {
  const std::string source = "peft config";
  const auto targets = targets_of(model, cfg, source);
  const auto saved = saved_params(model, cfg, source);
  std::vector<std::string> names;
  for (const auto& t : targets) {
    attach(t, cfg, {}, {});
    names.push_back(t.name);
  }
  freeze_base(model, saved);
  return names;
}

LoraConfig load_lora(nn::CausalLM& model, const std::string& dir) {
  const LoraConfig cfg = read_lora_config(dir);
  const std::string file_path = dir + "/adapter_model.safetensors";
  LLMTRAIN_CHECK(fs::exists(file_path), "PEFT adapter folder ", dir,
                 ": no adapter_model.safetensors (PEFT's older adapter_model.bin is not read)");
  const io::SafetensorsFile file(file_path);

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
  const auto targets = targets_of(model, cfg, dir + "/adapter_config.json");
  std::set<std::string> targeted;
  for (const auto& t : targets) {
    targeted.insert(t.name);
    LLMTRAIN_CHECK(pairs.count(t.name) != 0, file_path, ": no lora_A and lora_B for the targeted layer ", t.name);
  }
  const auto layers = model.module().named_modules(/*name_prefix=*/"", /*include_self=*/false);
  std::map<std::string, std::pair<torch::Tensor, torch::Tensor>> weights;  // layer -> (A, B)
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
    weights[layer] = {a, b};
  }
  const auto params = model.module().named_parameters();
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (parameter, value)
  for (const auto& [name, key] : saved) {
    const auto* p = params.find(name);
    LLMTRAIN_CHECK(p != nullptr, file_path, ": tensor ", key, " (of modules_to_save) has no parameter ", name,
                   " in the ", model.spec().family(), " model");
    copies.emplace_back(*p, saved_value(model, file, key, name, *p));
  }
  const auto to_save = saved_params(model, cfg, dir + "/adapter_config.json");

  for (const auto& t : targets) attach(t, cfg, weights[t.name].first, weights[t.name].second);
  {
    torch::NoGradGuard no_grad;
    for (auto& [p, v] : copies) p.copy_(v);
  }
  freeze_base(model, to_save);
  return cfg;
}

std::vector<std::pair<std::string, torch::Tensor>> lora_tensors(nn::CausalLM& model, const LoraConfig& cfg) {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  const auto cpu = [](const torch::Tensor& t) { return t.detach().to(torch::kCPU).contiguous(); };
  for (const auto& item : model.module().named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    auto* lin = item.value()->as<torch::nn::Linear>();
    if (lin == nullptr) continue;
    if (auto* a = dynamic_cast<LoraAdapterImpl*>(nn::adapter_of(*lin))) {
      out.emplace_back(kPrefix + item.key() + ".lora_A.weight", cpu(a->lora_A->weight));
      out.emplace_back(kPrefix + item.key() + ".lora_B.weight", cpu(a->lora_B->weight));
    }
  }
  LLMTRAIN_CHECK(!out.empty(), "peft: the ", model.spec().family(), " model has no LoRA adapters to save");
  for (const auto& [name, p] : saved_params(model, cfg, "peft config")) {
    const torch::Tensor v = cpu(p);
    out.emplace_back(kPrefix + name, transposed_in_files(model, name, v) ? v.t().contiguous() : v);
  }
  return out;
}

void write_lora_files(nn::CausalLM& model, const LoraConfig& cfg, const std::string& dir) {
  io::save_safetensors(dir + "/adapter_model.safetensors", lora_tensors(model, cfg), {{"format", "pt"}});
  fs::write_file_atomic(dir + "/adapter_config.json", lora_config_json(cfg, model.spec().is_gpt2()));
}

void save_lora(nn::CausalLM& model, const LoraConfig& cfg, const std::string& dir, const fs::OutputOptions& options) {
  fs::write_dir_atomic(dir, "peft-lora", options, [&](const std::string& tmp) { write_lora_files(model, cfg, tmp); });
}

void read_lora_weights(nn::CausalLM& model, const std::string& dir) {
  const std::string file_path = dir + "/adapter_model.safetensors";
  const io::SafetensorsFile file(file_path);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> copies;  // (parameter, value)
  std::set<std::string> wanted;
  for (const auto& item : model.module().named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    auto* lin = item.value()->as<torch::nn::Linear>();
    auto* a = lin != nullptr ? dynamic_cast<LoraAdapterImpl*>(nn::adapter_of(*lin)) : nullptr;
    if (a == nullptr) continue;
    for (const auto& [part, p] : {std::pair{"lora_A", a->lora_A->weight}, {"lora_B", a->lora_B->weight}}) {
      const std::string key = kPrefix + item.key() + "." + part + ".weight";
      wanted.insert(key);
      LLMTRAIN_CHECK(file.contains(key), file_path, ": no ", key, " for the adapter of layer ", item.key());
      const torch::Tensor v = file.get(key);
      LLMTRAIN_CHECK(v.sizes() == p.sizes(), file_path, ": tensor ", key, " has shape ", shape_str(v.sizes()),
                     "; the adapter's is ", shape_str(p.sizes()));
      copies.emplace_back(p, v);
    }
  }
  const auto params = model.module().named_parameters();
  for (const auto& key : file.names()) {
    if (wanted.count(key) != 0) continue;
    LLMTRAIN_CHECK(key.rfind(kPrefix, 0) == 0 && key.find(".lora_") == std::string::npos, file_path, ": tensor ", key,
                   " belongs to no adapter of the model");
    const std::string name = key.substr(std::string(kPrefix).size());
    const auto* p = params.find(name);
    LLMTRAIN_CHECK(p != nullptr && p->requires_grad(), file_path, ": tensor ", key,
                   " is no parameter of the model's modules to save");
    copies.emplace_back(*p, saved_value(model, file, key, name, *p));
  }
  torch::NoGradGuard no_grad;
  for (auto& [p, v] : copies) p.copy_(v);
}

std::vector<std::string> merge_lora(nn::CausalLM& model) {
  torch::NoGradGuard no_grad;
  std::vector<std::string> merged;
  for (const auto& item : model.module().named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    auto* lin = item.value()->as<torch::nn::Linear>();
    if (lin == nullptr || nn::plain(*lin)) continue;
    torch::Tensor& w = lin->weight;
    if (auto* stored = nn::stored_weight_of(*lin)) {  // the weight as the adapters were trained on it
      w.set_data(stored->weight(w.scalar_type()).to(w.device()));
      lin->unregister_module(nn::kStoredWeightName);
    }
    auto* a = dynamic_cast<LoraAdapterImpl*>(nn::adapter_of(*lin));
    if (a == nullptr) continue;
    const auto d = torch::kDouble;  // in float64, rounded once to the weight's dtype
    const torch::Tensor delta =
        torch::matmul(a->lora_B->weight.to(torch::kCPU, d), a->lora_A->weight.to(torch::kCPU, d)).mul_(a->scaling);
    w.copy_(w.to(torch::kCPU, d).add_(delta).to(w.device(), w.scalar_type()));
    lin->unregister_module(nn::kAdapterName);
    merged.push_back(item.key());
  }
  for (auto& p : model.module().parameters()) p.set_requires_grad(true);
  return merged;
}

// ---- NF4Weight ----------------------------------------------------------------------------------

NF4WeightImpl::NF4WeightImpl(const torch::Tensor& weight) {
  const ops::NF4Weight q = ops::nf4_quantize(weight);
  packed_ = register_buffer("packed", q.packed);
  absmax_codes_ = register_buffer("absmax_codes", q.absmax_codes);
  absmax2_ = register_buffer("absmax2", q.absmax2);
  offset_ = q.offset;
  shape_ = q.shape;
}

ops::NF4Weight NF4WeightImpl::quantized() const { return {packed_, absmax_codes_, absmax2_, offset_, shape_}; }

torch::Tensor NF4WeightImpl::linear(const torch::Tensor& x, const torch::Tensor& bias) {
  return ops::nf4_linear(x, quantized(), bias);
}

torch::Tensor NF4WeightImpl::weight(torch::ScalarType dtype) { return ops::nf4_dequantize(quantized(), dtype); }

// ---- Int8Weight ---------------------------------------------------------------------------------

Int8WeightImpl::Int8WeightImpl(const torch::Tensor& weight) {
  const ops::Int8Weight q = ops::int8_quantize(weight);
  codes_ = register_buffer("codes", q.codes);
  absmax_ = register_buffer("absmax", q.absmax);
}

torch::Tensor Int8WeightImpl::linear(const torch::Tensor& x, const torch::Tensor& bias) {
  return ops::int8_linear(x, {codes_, absmax_}, bias);
}

torch::Tensor Int8WeightImpl::weight(torch::ScalarType dtype) { return ops::int8_dequantize({codes_, absmax_}, dtype); }

std::vector<std::string> quantize_base(nn::CausalLM& model, BaseFormat format) {
  torch::NoGradGuard no_grad;
  std::vector<std::string> names;
  for (const auto& item : model.module().named_modules(/*name_prefix=*/"", /*include_self=*/false)) {
    auto* lin = item.value()->as<torch::nn::Linear>();
    if (lin == nullptr || !base_layer(item.key()) || item.key() == "lm_head" || nn::stored_weight_of(*lin) != nullptr)
      continue;
    std::shared_ptr<nn::StoredWeightImpl> stored;
    if (format == BaseFormat::kInt8) stored = std::make_shared<Int8WeightImpl>(lin->weight);
    else stored = std::make_shared<NF4WeightImpl>(lin->weight);
    lin->register_module(nn::kStoredWeightName, stored);
    lin->weight.set_data(torch::empty({0}, lin->weight.options()));  // the memory QLoRA saves
    lin->weight.set_requires_grad(false);
    names.push_back(item.key());
  }
  LLMTRAIN_CHECK(!names.empty(), "peft: the ", model.spec().family(), " model has no linear layer to quantize");
  return names;
}

std::vector<std::string> merge_lora(nn::CausalLM& model, const std::string& dir) {
  load_lora(model, dir);
  return merge_lora(model);
}

}  // namespace llmtrain::peft
