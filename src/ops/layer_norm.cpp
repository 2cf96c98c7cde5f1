#include "llmtrain/ops/layer_norm.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#if LLMTRAIN_WITH_CUDA
#include "layer_norm_cuda.h"
#endif

namespace llmtrain::ops {
namespace {

void check_args(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  LLMTRAIN_CHECK(x.dim() >= 1, "layer_norm: x must have at least 1 dimension, got ", x.sizes());
  const int64_t c = x.size(-1);
  LLMTRAIN_CHECK(weight.dim() == 1 && weight.size(0) == c, "layer_norm: weight must be (", c, ") to match x ",
                 x.sizes(), ", got ", weight.sizes());
  LLMTRAIN_CHECK(bias.dim() == 1 && bias.size(0) == c, "layer_norm: bias must be (", c, ") to match x ", x.sizes(),
                 ", got ", bias.sizes());
}

// ATen's autocast rule for layer norm, which the kernels (called outside the dispatcher) would miss:
// reduced-precision inputs are normalised in float32.
bool autocast_upcasts(const at::Tensor& x) {
  const bool reduced = x.scalar_type() == at::kHalf || x.scalar_type() == at::kBFloat16;
  return reduced && x.is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA);
}

// x and delta (checked to match, or undefined) in the dtype x + delta would have.
std::pair<at::Tensor, at::Tensor> summands(const at::Tensor& x, const at::Tensor& delta, const char* who) {
  if (!delta.defined()) return {x, delta};
  LLMTRAIN_CHECK(delta.sizes() == x.sizes(), who, ": delta must have the shape of x ", x.sizes(), ", got ",
                 delta.sizes());
  const auto t = at::promote_types(x.scalar_type(), delta.scalar_type());
  return {x.to(t), delta.to(t)};
}

}  // namespace

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  return add_layer_norm(x, at::Tensor(), weight, bias, eps).second;
}

std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                                 const at::Tensor& bias, double eps) {
  check_args(x, weight, bias);
  const auto [a, d] = summands(x, delta, "add_layer_norm");
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kLayerNorm)) {
    if (!d.defined()) {
      const at::Tensor xi = autocast_upcasts(x) ? x.to(at::kFloat) : x;
      if (cuda::layer_norm_supported(xi, weight, bias))
        return {x, cuda::add_layer_norm(xi, d, weight, bias, eps).second};
    } else if (!autocast_upcasts(a) && cuda::layer_norm_supported(a, weight, bias)) {
      return cuda::add_layer_norm(a, d, weight, bias, eps);  // else h in bf16/fp16 is normalised in float32 below
    }
  }
#endif
  const at::Tensor h = d.defined() ? a + d : x;
  // ATen's CUDA kernel wants weights of h's dtype: bf16/fp16 rows with float32 weights go in float32.
  if (h.is_cuda() && weight.scalar_type() != h.scalar_type() && !autocast_upcasts(h))
    return {h, at::layer_norm(h.to(weight.scalar_type()), {h.size(-1)}, weight, bias, eps).to(h.scalar_type())};
  return {h, at::layer_norm(h, {h.size(-1)}, weight, bias, eps)};
}

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  return add_rms_norm(x, at::Tensor(), weight, eps).second;
}

std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                               double eps) {
  LLMTRAIN_CHECK(x.dim() >= 1 && weight.dim() == 1 && weight.size(0) == x.size(-1), "rms_norm: weight must be (",
                 x.dim() >= 1 ? x.size(-1) : 0, ") to match x ", x.sizes(), ", got ", weight.sizes());
  const auto [a, d] = summands(x, delta, "add_rms_norm");
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kRmsNorm) && cuda::rms_norm_supported(a, weight))
    return cuda::add_rms_norm(a, d, weight, eps);
#endif
  const at::Tensor h = d.defined() ? a + d : a;
  const at::Tensor f = h.to(at::kFloat);
  const at::Tensor normed = f * at::rsqrt(f.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return {h, weight * normed.to(h.scalar_type())};
}

}  // namespace llmtrain::ops
