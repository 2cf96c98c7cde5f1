#include "llmtrain/ops/fp8.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>

#include "llmtrain/config.h"  // LLMTRAIN_WITH_CUDA
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#if LLMTRAIN_WITH_CUDA
#include "fp8_cuda.h"
#endif

namespace llmtrain::ops {
namespace {

// Column 0 of history row `row` takes the maximum of what it holds and t's amax (on t's device: no sync).
void record_amax(const at::Tensor& history, int64_t row, const at::Tensor& t) {
  at::Tensor slot = history.select(0, row).narrow(0, 0, 1);
  slot.copy_(at::maximum(slot, t.detach().abs().amax().to(at::kFloat).reshape({1})));
}

// What a cast multiplies by: the scales, an unset one (0) as 1.
at::Tensor set_or_one(const at::Tensor& scale) { return at::where(scale == 0, at::ones_like(scale), scale); }

// The product of two fp8 code tensors as float32, a (..., k) with b (n, k), times the two inverse scales.
at::Tensor scaled_product(const at::Tensor& a, const at::Tensor& b, const at::Tensor& inv) {
  return at::matmul(a.to(at::kFloat), b.to(at::kFloat).t()) * inv;
}

struct Fp8LinearFn : torch::autograd::Function<Fp8LinearFn> {
  // No bias travels as an empty tensor: autograd's functions take no undefined inputs.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& history, const at::Tensor& scale_in, bool record,
                            bool first_pass) {
    if (record) {
      record_amax(history, 0, x);
      record_amax(history, 1, weight);
    }
    const at::Tensor scale = set_or_one(scale_in);
    const at::Tensor qx = fp8_codes(x, scale.narrow(0, 0, 1), at::kFloat8_e4m3fn),
                     qw = fp8_codes(weight, scale.narrow(0, 1, 1), at::kFloat8_e4m3fn);
    const at::Tensor inv = scale.reciprocal();
    at::Tensor y = scaled_product(qx, qw, inv[0] * inv[1]);
    if (bias.numel() > 0) y = y + bias.to(at::kFloat);
    ctx->save_for_backward({qx, qw, history, scale_in});
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    ctx->saved_data["first_pass"] = first_pass;
    return y.to(x.scalar_type());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &qx = saved[0], &qw = saved[1], &history = saved[2];
    const at::Tensor& dy = grads[0];
    if (ctx->saved_data["first_pass"].toBool()) fp8_first_scale({history, saved[3]}, 2, dy);
    const at::Tensor scale = set_or_one(saved[3]);
    record_amax(history, 2, dy);
    const at::Tensor qdy = fp8_codes(dy, scale.narrow(0, 2, 1), at::kFloat8_e5m2);
    const at::Tensor inv = scale.reciprocal();
    at::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) dx = scaled_product(qdy, qw.t(), inv[2] * inv[1]).to(dy.scalar_type());
    if (ctx->needs_input_grad(1)) {
      const int64_t n = qdy.size(-1), k = qx.size(-1);
      dw = scaled_product(qdy.reshape({-1, n}).t(), qx.reshape({-1, k}).t(), inv[2] * inv[0]).to(dy.scalar_type());
    }
    if (ctx->needs_input_grad(2) && ctx->saved_data["has_bias"].toBool())
      db = dy.reshape({-1, dy.size(-1)}).to(at::kFloat).sum(0).to(dy.scalar_type());
    return {dx, dw, db, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

void check_scaling(const Fp8Scaling& s, const char* what) {
  LLMTRAIN_CHECK(s.amax_history.defined() && s.scale.defined() && s.amax_history.dim() == 2 &&
                     s.amax_history.size(0) == 3 && s.amax_history.size(1) >= 1 && s.scale.dim() == 1 &&
                     s.scale.size(0) == 3 && s.amax_history.scalar_type() == at::kFloat &&
                     s.scale.scalar_type() == at::kFloat,
                 what, ": the scaling must hold a float32 amax history (3, H >= 1) and scales (3), got ",
                 s.amax_history.defined() ? s.amax_history.sizes() : at::IntArrayRef{}, " and ",
                 s.scale.defined() ? s.scale.sizes() : at::IntArrayRef{});
}

}  // namespace

at::Tensor fp8_codes(const at::Tensor& x, const at::Tensor& scale, at::ScalarType type) {
  LLMTRAIN_CHECK(type == at::kFloat8_e4m3fn || type == at::kFloat8_e5m2, "fp8_codes: type must be e4m3fn or e5m2, got ",
                 type);
  const double max = type == at::kFloat8_e4m3fn ? kE4M3Max : kE5M2Max;
  return (x.detach().to(at::kFloat) * scale).clamp(-max, max).to(type);
}

Fp8Scaling fp8_scaling(int64_t history, const at::Device& device) {
  LLMTRAIN_CHECK(history >= 1, "fp8 amax history must hold at least one step, got ", history);
  const auto f = at::TensorOptions().dtype(at::kFloat).device(device);
  return {at::zeros({3, history}, f), at::zeros({3}, f)};
}

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const Fp8Scaling& s) {
  check_scaling(s, "fp8_linear");
  LLMTRAIN_CHECK(x.dim() >= 1 && weight.dim() == 2 && x.size(-1) == weight.size(1), "fp8_linear: x ", x.sizes(),
                 " does not match the weight ", weight.sizes(), " (out, in)");
  LLMTRAIN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)), "fp8_linear: bias must be (",
                 weight.size(0), "), got ", bias.sizes());
  LLMTRAIN_CHECK(at::isFloatingType(x.scalar_type()) && weight.scalar_type() == x.scalar_type() &&
                     (!bias.defined() || bias.scalar_type() == x.scalar_type()),
                 "fp8_linear: x, weight and bias must be of one floating dtype, got ", x.scalar_type(), ", ",
                 weight.scalar_type(), (bias.defined() ? ", " : ""),
                 (bias.defined() ? c10::toString(bias.scalar_type()) : ""));
  // Recorded in training's passes, not in evaluation's or sampling's (grad mode off; inside apply it is
  // always off).
  const bool record = at::GradMode::is_enabled();
  Fp8Scaling use = s;
  if (s.first_pass) {
    if (!record) use.scale = s.scale.clone();  // evaluation: this call's scales, the layer's left unset
    fp8_first_scale(use, 0, x);
    fp8_first_scale(use, 1, weight);
  }
  use.first_pass = s.first_pass && record;  // the output gradient's scale, in backward
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kFp8) && cuda::fp8_supported(x, weight, bias, use))
    return cuda::fp8_linear(x, weight, bias, use, record);
#endif
  const at::Tensor b = bias.defined() ? bias : at::empty({0}, x.options());
  return Fp8LinearFn::apply(x, weight, b, use.amax_history, use.scale, record, use.first_pass);
}

void fp8_first_scale(const Fp8Scaling& s, int64_t row, const at::Tensor& t) {
  LLMTRAIN_CHECK(row >= 0 && row < 3, "fp8_first_scale: row must be 0, 1 or 2, got ", row);
  at::NoGradGuard no_grad;
  at::Tensor slot = s.scale.narrow(0, row, 1);
  const at::Tensor amax = t.detach().abs().amax().to(at::kFloat).reshape({1});
  const at::Tensor fresh = amax.reciprocal() * (row == 2 ? kE5M2Max : kE4M3Max);
  slot.copy_(at::where((slot == 0) & (amax > 0) & at::isfinite(fresh), fresh, slot));
}

void fp8_update_scales(const Fp8Scaling& s, int64_t margin) { fp8_update_scales(std::vector<Fp8Scaling>{s}, margin); }

void fp8_update_scales(const std::vector<Fp8Scaling>& layers, int64_t margin) {
  for (const Fp8Scaling& s : layers) check_scaling(s, "fp8_update_scales");
  LLMTRAIN_CHECK(margin >= 0 && margin <= 64, "fp8 margin must be in [0, 64], got ", margin);
  at::NoGradGuard no_grad;
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kFp8) && cuda::fp8_update_supported(layers))
    return cuda::fp8_update_scales(layers, margin);
#endif
  for (const Fp8Scaling& s : layers) {
    const at::Tensor amax = s.amax_history.amax(1);
    // Filled on the scale's device (at::tensor from host values would copy over the bus each layer, each
    // step).
    const at::Tensor max = at::full({3}, kE4M3Max, s.scale.options());
    max.narrow(0, 2, 1).fill_(kE5M2Max);
    const at::Tensor next = max / amax / std::ldexp(1.0, int(margin));
    s.scale.copy_(at::where((amax > 0) & at::isfinite(next), next, s.scale));
    s.amax_history.copy_(s.amax_history.roll(1, 1));
    s.amax_history.select(1, 0).zero_();
  }
}

}  // namespace llmtrain::ops
