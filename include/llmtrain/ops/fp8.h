// fp8 products for training (train.precision: fp8), the reference path: a linear layer's input and weight
// rounded to e4m3 and its output's gradient to e5m2, each through a scale of its own (per tensor), the
// product and the two gradient products of those codes summed in float32 and multiplied by the inverse
// scales (what an fp8 tensor-core product computes), rounded to the operands' dtypes. The scales are
// delayed: each comes from the largest magnitude (amax) its tensor had over the last steps. fp8_linear
// records this call's amaxes; fp8_update_scales, after an optimizer step, turns the history into the
// next step's scales. Before the first update a scale is unset (0), and the first training pass takes it
// from its own tensor's amax: scale 1 there would put small weights among e4m3's subnormals and most of
// the first step's gradients below e5m2's smallest value.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace llmtrain::ops {

constexpr double kE4M3Max = 448.0;    // the largest e4m3 (fn) value
constexpr double kE5M2Max = 57344.0;  // the largest finite e5m2 value

/// The fp8 codes of x * scale in `type` (at::kFloat8_e4m3fn or at::kFloat8_e5m2), rounded to nearest
/// even and saturated at the format's largest value; scale is a one-element float32 tensor.
at::Tensor fp8_codes(const at::Tensor& x, const at::Tensor& scale, at::ScalarType type);

/// One linear layer's delayed scaling, float32 tensors on the layer's device: amax_history (3, H), rows
/// the input, the weight and the output's gradient, column 0 the current step's; scale (3), the
/// multipliers into fp8 (0: unset, which casts as 1). `first_pass`: a scale may still be unset, so each
/// call looks (an amax pass over the tensors; the owner clears it after its first training pass to save
/// that).
struct Fp8Scaling {
  at::Tensor amax_history;
  at::Tensor scale;
  bool first_pass = true;
};
Fp8Scaling fp8_scaling(int64_t history, const at::Device& device);

/// y = x W^T + b with x and W as e4m3 codes and the output's gradient as e5m2 codes, under s's scales;
/// the amaxes of x and W (a forward with grad mode on: training's, not evaluation's) and of the output's
/// gradient (backward) go into column 0 of s.amax_history, as the maximum with what it holds (the
/// micro-steps of one step share it). With s.first_pass, an unset scale is first set by fp8_first_scale
/// (in training; evaluation takes that scale for the call without keeping it). x, W and b of one
/// floating dtype; y and the gradients in it.
///   auto y = llmtrain::ops::fp8_linear(x, c_fc->weight, c_fc->bias, scaling);
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const Fp8Scaling& s);

/// Where s's scale of `row` (0 input, 1 weight, 2 output gradient) is unset (0), sets it from t's own
/// amax as fp8_update_scales would (left unset where that amax is 0 or the scale would not be finite);
/// on t's device, without waiting for it.
void fp8_first_scale(const Fp8Scaling& s, int64_t row, const at::Tensor& t);

/// After an optimizer step: each row's scale becomes its format's largest value over the row's largest
/// amax in the history, divided by 2^margin (unchanged where that amax is 0, or the scale would not be
/// finite), then the history moves on one column and column 0 starts again from 0.
void fp8_update_scales(const Fp8Scaling& s, int64_t margin);
/// The same for many layers at once (on CUDA, one launch for all of them).
void fp8_update_scales(const std::vector<Fp8Scaling>& layers, int64_t margin);

}  // namespace llmtrain::ops
