#include "llmtrain/nn/adapter.h"

#include "../core/strings.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/linear.h"

namespace llmtrain::nn {
namespace {

template <typename T>
T* child_of(const torch::nn::LinearImpl& layer) {
  for (const auto& child : layer.children())  // none for a plain layer: no allocation
    if (auto* c = dynamic_cast<T*>(child.get())) return c;
  return nullptr;
}

}  // namespace

LinearAdapterImpl* adapter_of(const torch::nn::LinearImpl& layer) { return child_of<LinearAdapterImpl>(layer); }

StoredWeightImpl* stored_weight_of(const torch::nn::LinearImpl& layer) { return child_of<StoredWeightImpl>(layer); }

Fp8LayerImpl* fp8_of(const torch::nn::LinearImpl& layer) { return child_of<Fp8LayerImpl>(layer); }

bool plain(const torch::nn::LinearImpl& layer) { return layer.children().empty(); }

Fp8LayerImpl::Fp8LayerImpl(int64_t history, const torch::Device& device) {
  const ops::Fp8Scaling s = ops::fp8_scaling(history, device);
  amax_history = register_buffer("amax_history", s.amax_history);
  scale = register_buffer("scale", s.scale);
}

torch::Tensor bias_of(const torch::nn::Linear& layer) { return layer->options.bias() ? layer->bias : torch::Tensor(); }

torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  if (plain(*layer)) return ops::linear(x, layer->weight, bias_of(layer));
  StoredWeightImpl* stored = stored_weight_of(*layer);
  Fp8LayerImpl* fp8 = stored ? nullptr : fp8_of(*layer);
  torch::Tensor y = stored ? stored->linear(x, bias_of(layer))
                    : fp8  ? ops::fp8_linear(x, layer->weight, bias_of(layer), fp8->scaling())
                           : ops::linear(x, layer->weight, bias_of(layer));
  if (fp8 && torch::GradMode::is_enabled()) fp8->first_pass = false;  // its training pass set every scale
  if (LinearAdapterImpl* a = adapter_of(*layer)) y = a->add_to(y, x);
  return y;
}

std::vector<std::string> enable_fp8(torch::nn::Module& model, int64_t history, const std::vector<std::string>& skip) {
  std::vector<std::string> given;
  for (const auto& item : model.named_modules("", /*include_self=*/false)) {
    auto* layer = dynamic_cast<torch::nn::LinearImpl*>(item.value().get());
    if (layer == nullptr || fp8_of(*layer) != nullptr) continue;
    bool skipped = false;
    for (const std::string& s : skip) skipped = skipped || item.key() == s || detail::ends_with(item.key(), "." + s);
    if (skipped) continue;
    LLMTRAIN_CHECK(plain(*layer), "fp8: layer ", item.key(),
                   " has an adapter or a stored weight; fp8 products train full weights (leave peft off)");
    layer->register_module(kFp8Name, std::make_shared<Fp8LayerImpl>(history, layer->weight.device()));
    given.push_back(item.key());
  }
  return given;
}

int64_t update_fp8_scales(torch::nn::Module& model, int64_t margin,
                          const std::function<void(torch::Tensor&)>& reduce_max) {
  std::vector<const Fp8LayerImpl*> layers;
  for (const auto& m : model.modules(/*include_self=*/false))
    if (const auto* f = dynamic_cast<const Fp8LayerImpl*>(m.get())) layers.push_back(f);
  if (reduce_max && !layers.empty()) {  // one collective for every layer's current amaxes
    std::vector<torch::Tensor> current;
    for (const auto* f : layers) current.push_back(f->amax_history.select(1, 0));
    torch::Tensor all = torch::stack(current);
    reduce_max(all);
    for (size_t i = 0; i < layers.size(); ++i) current[i].copy_(all[int64_t(i)]);
  }
  std::vector<ops::Fp8Scaling> all;
  for (const auto* f : layers) all.push_back(f->scaling());
  ops::fp8_update_scales(all, margin);
  return int64_t(layers.size());
}

}  // namespace llmtrain::nn
