#include "llmtrain/ops/linear.h"

#include <ATen/ATen.h>

#include "autocast.h"
#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#if LLMTRAIN_WITH_CUDA
#include "cuda_ops.h"
#endif

namespace llmtrain::ops {

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  LLMTRAIN_CHECK(x.dim() >= 1, "linear: x must have at least 1 dimension, got ", x.sizes());
  LLMTRAIN_CHECK(weight.dim() == 2 && weight.size(1) == x.size(-1), "linear: weight must be (out, ", x.size(-1),
                 ") to match x ", x.sizes(), ", got ", weight.sizes());
  if (bias.defined())
    LLMTRAIN_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), "linear: bias must be (", weight.size(0),
                   "), got ", bias.sizes());
#if LLMTRAIN_WITH_CUDA
  if (bias.defined() && cuda_kernel_enabled("linear")) {
    const auto t = detail::autocast_like_linear({x, weight, bias});
    if (cuda::linear_supported(t[0], t[1], t[2])) return cuda::linear(t[0], t[1], t[2]);
  }
#endif
  return at::linear(x, weight, bias);
}

}  // namespace llmtrain::ops
