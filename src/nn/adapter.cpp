#include "llmtrain/nn/adapter.h"

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

bool plain(const torch::nn::LinearImpl& layer) { return layer.children().empty(); }

torch::Tensor bias_of(const torch::nn::Linear& layer) { return layer->options.bias() ? layer->bias : torch::Tensor(); }

torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  if (plain(*layer)) return ops::linear(x, layer->weight, bias_of(layer));
  StoredWeightImpl* stored = stored_weight_of(*layer);
  torch::Tensor y = stored ? stored->linear(x, bias_of(layer)) : ops::linear(x, layer->weight, bias_of(layer));
  if (LinearAdapterImpl* a = adapter_of(*layer)) y = a->add_to(y, x);
  return y;
}

}  // namespace llmtrain::nn
