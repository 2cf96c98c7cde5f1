#include "llmtrain/ops/linear.h"

#include <ATen/ATen.h>

#include "autocast.h"
#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#include "llmtrain/ops/gelu.h"
#include "llmtrain/ops/layer_norm.h"
#if LLMTRAIN_WITH_CUDA
#include "linear_cuda.h"
#endif

namespace llmtrain::ops {

namespace {

void check_layer(const char* what, const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  LLMTRAIN_CHECK(x.dim() >= 1, what, ": x must have at least 1 dimension, got ", x.sizes());
  LLMTRAIN_CHECK(weight.dim() == 2 && weight.size(1) == x.size(-1), what, ": weight must be (out, ", x.size(-1),
                 ") to match x ", x.sizes(), ", got ", weight.sizes());
  if (bias.defined())
    LLMTRAIN_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), what, ": bias must be (", weight.size(0),
                   "), got ", bias.sizes());
}

}  // namespace

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  check_layer("linear", x, weight, bias);
#if LLMTRAIN_WITH_CUDA
  if (bias.defined() && cuda_kernel_enabled(Kernel::kLinear)) {
    const auto t = detail::autocast_like_linear({x, weight, bias});
    if (cuda::linear_supported(t[0], t[1], t[2])) return cuda::linear(t[0], t[1], t[2]);
  }
#endif
  return at::linear(x, weight, bias);
}

std::pair<at::Tensor, at::Tensor> norm_linear(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& ln_weight,
                                              const at::Tensor& ln_bias, double eps, const at::Tensor& weight,
                                              const at::Tensor& bias, bool gelu) {
  check_layer("norm_linear", x, weight, bias);
  LLMTRAIN_CHECK(!at::GradMode::is_enabled() ||
                     !(x.requires_grad() || (delta.defined() && delta.requires_grad()) || ln_weight.requires_grad() ||
                       ln_bias.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad())),
                 "norm_linear has no backward; call it under torch::NoGradGuard");
#if LLMTRAIN_WITH_CUDA
  const bool autocast = at::autocast::is_autocast_enabled(at::kCUDA);
  if (x.is_cuda() && !autocast && cuda_kernel_enabled(Kernel::kGemv) && ln_weight.dim() == 1 &&
      ln_weight.size(0) == x.size(-1) && ln_bias.sizes() == ln_weight.sizes() &&
      (!delta.defined() || delta.sizes() == x.sizes())) {
    at::Tensor h, y;
    if (cuda::gemv(x, delta, ln_weight, ln_bias, eps, {weight}, {bias},
                   gelu ? kernels::GemvAct::kGelu : kernels::GemvAct::kNone, h, y))
      return {h, y};
  }
#endif
  auto [h, a] = add_layer_norm(x, delta, ln_weight, ln_bias, eps);
  if (!gelu) return {h, linear(a, weight, bias)};
#if LLMTRAIN_WITH_CUDA
  if (!autocast && bias.defined() && cuda_kernel_enabled(Kernel::kLinear) && cuda::linear_supported(a, weight, bias)) {
    at::Tensor y;
    if (cuda::linear_gelu_forward(a, weight, bias, y)) return {h, y};
  }
#endif
  return {h, ops::gelu(linear(a, weight, bias))};
}

std::pair<at::Tensor, at::Tensor> rms_norm_linear(const at::Tensor& x, const at::Tensor& delta,
                                                  const at::Tensor& norm_weight, double eps, at::TensorList weights,
                                                  at::TensorList biases, bool swiglu) {
  LLMTRAIN_CHECK(!weights.empty() && weights.size() <= 3, "rms_norm_linear: takes 1 to 3 weights, got ",
                 weights.size());
  LLMTRAIN_CHECK(biases.empty() || biases.size() == weights.size(), "rms_norm_linear: ", weights.size(),
                 " weights need as many biases (or none), got ", biases.size());
  LLMTRAIN_CHECK(!swiglu || (weights.size() == 2 && weights[0].sizes() == weights[1].sizes()),
                 "rms_norm_linear: SwiGLU takes two weights of one shape (gate, up)");
  const auto bias = [&](size_t i) { return biases.empty() ? at::Tensor() : biases[i]; };
  bool grad = x.requires_grad() || (delta.defined() && delta.requires_grad()) || norm_weight.requires_grad();
  for (size_t i = 0; i < weights.size(); ++i) {
    check_layer("rms_norm_linear", x, weights[i], bias(i));
    grad = grad || weights[i].requires_grad() || (bias(i).defined() && bias(i).requires_grad());
  }
  LLMTRAIN_CHECK(!at::GradMode::is_enabled() || !grad,
                 "rms_norm_linear has no backward; call it under torch::NoGradGuard");
#if LLMTRAIN_WITH_CUDA
  if (x.is_cuda() && !at::autocast::is_autocast_enabled(at::kCUDA) && cuda_kernel_enabled(Kernel::kGemv) &&
      norm_weight.dim() == 1 && norm_weight.size(0) == x.size(-1) && (!delta.defined() || delta.sizes() == x.sizes())) {
    at::Tensor h, y;
    if (cuda::gemv(x, delta, norm_weight, {}, eps, weights, biases,
                   swiglu ? kernels::GemvAct::kSwiGLU : kernels::GemvAct::kNone, h, y))
      return {h, y};
  }
#endif
  auto [h, a] = add_rms_norm(x, delta, norm_weight, eps);
  if (swiglu) return {h, ops::swiglu(linear(a, weights[0], bias(0)), linear(a, weights[1], bias(1)))};
  std::vector<at::Tensor> ys;
  for (size_t i = 0; i < weights.size(); ++i) ys.push_back(linear(a, weights[i], bias(i)));
  return {h, ys.size() == 1 ? ys[0] : at::cat(ys, -1)};
}

}  // namespace llmtrain::ops
