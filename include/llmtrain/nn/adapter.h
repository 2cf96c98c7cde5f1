// What may hang under a torch::nn::Linear besides its own weight and bias: an adapter (child
// "adapter"), which adds its output to the layer's, y = x W^T + b + adapter(x); and a stored
// form of a frozen weight (child "stored", e.g. QLoRA's 4-bit one), which nn::linear multiplies by in
// place of the layer's weight parameter, then left empty. peft/ attaches both through this seam; nn's
// models run every linear layer through nn::linear, and take their unfused paths (the fused MLP, the
// decode step's norm-folded products) for a layer that is not plain.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

namespace llmtrain::nn {

/// What an adapter adds to its layer's output.
class LinearAdapterImpl : public torch::nn::Module {
 public:
  /// y + adapter(x) as a new tensor, for x (..., in) and y (..., out) the layer's output for x. The
  /// adapter takes y so that it may fold the add into its own product (no pass over y's size).
  virtual torch::Tensor add_to(const torch::Tensor& y, const torch::Tensor& x) = 0;
};

/// A frozen weight (out, in) held in another form than the layer's parameter.
class StoredWeightImpl : public torch::nn::Module {
 public:
  /// x W^T + bias (bias undefined: none), in x's dtype; the gradient flows to x alone.
  virtual torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& bias) = 0;
  /// W, in `dtype`, on the module's device.
  virtual torch::Tensor weight(torch::ScalarType dtype) = 0;
};

/// The child names they are registered under.
constexpr const char* kAdapterName = "adapter";
constexpr const char* kStoredWeightName = "stored";

/// The adapter of `layer`, or null.
LinearAdapterImpl* adapter_of(const torch::nn::LinearImpl& layer);
/// The stored form of `layer`'s weight, or null.
StoredWeightImpl* stored_weight_of(const torch::nn::LinearImpl& layer);
/// True for a layer with neither: its weight parameter is all it computes with.
bool plain(const torch::nn::LinearImpl& layer);

/// The layer's bias, undefined where it has none.
torch::Tensor bias_of(const torch::nn::Linear& layer);

/// x W^T + b through ops::linear (or the stored weight's product), plus the layer's adapter where it
/// has one.
///   auto qkv = llmtrain::nn::linear(attn->c_attn, x);
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x);

}  // namespace llmtrain::nn
