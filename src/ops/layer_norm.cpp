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

}  // namespace

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  return add_layer_norm(x, at::Tensor(), weight, bias, eps).second;
}

std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                                 const at::Tensor& bias, double eps) {
  check_args(x, weight, bias);
  if (delta.defined())
    LLMTRAIN_CHECK(delta.sizes() == x.sizes(), "add_layer_norm: delta must have the shape of x ", x.sizes(), ", got ",
                   delta.sizes());
  at::Tensor a = x, d = delta;
  if (d.defined() && d.scalar_type() != a.scalar_type()) {  // the dtype x + delta would have
    const auto t = at::promote_types(a.scalar_type(), d.scalar_type());
    a = a.to(t);
    d = d.to(t);
  }
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

}  // namespace llmtrain::ops
