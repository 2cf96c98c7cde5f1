// What may hang under a torch::nn::Linear besides its own weight and bias: an adapter (child
// "adapter"), which adds its output to the layer's, y = x W^T + b + adapter(x); a stored form of a
// frozen weight (child "stored", e.g. QLoRA's 4-bit one), which nn::linear multiplies by in place of
// the layer's weight parameter, then left empty; and fp8 products' scaling (child "fp8"), with which
// nn::linear takes ops::fp8_linear. peft/ and train.precision fp8 attach them through this seam; nn's
// models run every linear layer through nn::linear, and take their unfused paths (the fused MLP, the
// decode step's norm-folded products) for a layer that is not plain.
#pragma once

#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "llmtrain/ops/fp8.h"

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

/// The delayed scaling of a layer's fp8 products (ops/fp8.h), as the buffers "amax_history" (3, H)
/// and "scale" (3): checkpoints keep them, and a resume goes on with the same scales.
class Fp8LayerImpl : public torch::nn::Module {
 public:
  Fp8LayerImpl(int64_t history, const torch::Device& device);
  ops::Fp8Scaling scaling() const { return {amax_history, scale, first_pass}; }
  torch::Tensor amax_history, scale;
  bool first_pass = true;  // until the layer's first training pass: its scales may be unset
};

/// The child names they are registered under.
constexpr const char* kAdapterName = "adapter";
constexpr const char* kStoredWeightName = "stored";
constexpr const char* kFp8Name = "fp8";

/// The adapter of `layer`, or null.
LinearAdapterImpl* adapter_of(const torch::nn::LinearImpl& layer);
/// The stored form of `layer`'s weight, or null.
StoredWeightImpl* stored_weight_of(const torch::nn::LinearImpl& layer);
/// The fp8 scaling of `layer`, or null.
Fp8LayerImpl* fp8_of(const torch::nn::LinearImpl& layer);
/// True for a layer with none of them: its weight parameter is all it computes with.
bool plain(const torch::nn::LinearImpl& layer);

/// The layer's bias, undefined where it has none.
torch::Tensor bias_of(const torch::nn::Linear& layer);

/// x W^T + b through ops::linear (the stored weight's product, or ops::fp8_linear with the layer's fp8
/// scaling), plus the layer's adapter where it has one.
///   auto qkv = llmtrain::nn::linear(attn->c_attn, x);
torch::Tensor linear(const torch::nn::Linear& layer, const torch::Tensor& x);

/// Gives fp8 scaling (an amax history of `history` steps) to every linear layer of `model` whose
/// qualified name ends in none of `skip` (e.g. "lm_head", "h.0.mlp.c_fc"); layers with a stored weight
/// or an adapter are an error (fp8 trains full weights). Returns the names given it, in module order.
std::vector<std::string> enable_fp8(torch::nn::Module& model, int64_t history, const std::vector<std::string>& skip);

/// ops::fp8_update_scales for every fp8 layer of `model` (after each optimizer step); the count. Where
/// given, `reduce_max` first replaces the layers' current amaxes, one (layers, 3) tensor, with their
/// maximum over the data-parallel ranks, so that every rank takes the same scales.
int64_t update_fp8_scales(torch::nn::Module& model, int64_t margin,
                          const std::function<void(torch::Tensor&)>& reduce_max = nullptr);

}  // namespace llmtrain::nn
