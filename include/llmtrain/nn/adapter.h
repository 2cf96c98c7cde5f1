// Adapters on linear layers: a module registered under a torch::nn::Linear as its child "adapter",
// whose output nn::linear adds to the layer's, y = x W^T + b + adapter(x). peft/ attaches LoRA through
// this seam; nn's models run every linear layer through nn::linear, and take their unfused paths
// (the fused MLP, the decode step's norm-folded products) for a layer that has one.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

namespace llmtrain::nn {

/// What an adapter adds to its layer's output.
class LinearAdapterImpl : public torch::nn::Module {
 public:
  /// x (..., in) -> (..., out), the layer's in and out.
  virtual torch::Tensor forward(const torch::Tensor& x) = 0;
};

/// The child name an adapter is registered under.
constexpr const char* kAdapterName = "adapter";

/// The adapter of `layer`, or null.
LinearAdapterImpl* adapter_of(const torch::nn::LinearImpl& layer);

/// The layer's bias, undefined where it has none.
torch::Tensor bias_of(const torch::nn::Linear& layer);

/// x W^T + b through ops::linear, plus the layer's adapter where it has one.
///   auto qkv = llmtrain::nn::linear(attn->c_attn, x);
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x);

}  // namespace llmtrain::nn
