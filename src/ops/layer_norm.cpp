#include "llmtrain/ops/layer_norm.h"

#include <ATen/ATen.h>

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#if LLMTRAIN_WITH_CUDA
#include "cuda_ops.h"
#endif

namespace llmtrain::ops {

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  LLMTRAIN_CHECK(x.dim() >= 1, "layer_norm: x must have at least 1 dimension, got ", x.sizes());
  const int64_t c = x.size(-1);
  LLMTRAIN_CHECK(weight.dim() == 1 && weight.size(0) == c, "layer_norm: weight must be (", c, ") to match x ",
                 x.sizes(), ", got ", weight.sizes());
  LLMTRAIN_CHECK(bias.dim() == 1 && bias.size(0) == c, "layer_norm: bias must be (", c, ") to match x ", x.sizes(),
                 ", got ", bias.sizes());
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernels_enabled() && cuda::layer_norm_supported(x, weight, bias))
    return cuda::layer_norm(x, weight, bias, eps);
#endif
  return at::layer_norm(x, {c}, weight, bias, eps);
}

}  // namespace llmtrain::ops
