#include "llmtrain/nn/adapter.h"

#include "llmtrain/ops/linear.h"

namespace llmtrain::nn {

LinearAdapterImpl* adapter_of(const torch::nn::LinearImpl& layer) {
  for (const auto& child : layer.children())  // none for a plain layer: no allocation
    if (auto* a = dynamic_cast<LinearAdapterImpl*>(child.get())) return a;
  return nullptr;
}

torch::Tensor bias_of(const torch::nn::Linear& layer) { return layer->options.bias() ? layer->bias : torch::Tensor(); }

torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x) {
  torch::Tensor y = ops::linear(x, layer->weight, bias_of(layer));
  if (LinearAdapterImpl* a = adapter_of(*layer)) y = y + a->forward(x);
  return y;
}

}  // namespace llmtrain::nn
