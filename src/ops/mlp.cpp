#include "llmtrain/ops/mlp.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include "autocast.h"
#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#include "llmtrain/ops/gelu.h"
#include "llmtrain/ops/linear.h"
#if LLMTRAIN_WITH_CUDA
#include "linear_cuda.h"
#endif

namespace llmtrain::ops {
namespace {

void check_layer(const char* what, const at::Tensor& weight, const at::Tensor& bias, int64_t in) {
  LLMTRAIN_CHECK(weight.dim() == 2 && weight.size(1) == in, what, ": weight must be (out, ", in, "), got ",
                 weight.sizes());
  LLMTRAIN_CHECK(bias.dim() == 1 && bias.size(0) == weight.size(0), what, ": bias must be (", weight.size(0), "), got ",
                 bias.sizes());
}

}  // namespace

at::Tensor mlp(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
               const at::Tensor& proj_weight, const at::Tensor& proj_bias) {
  LLMTRAIN_CHECK(x.dim() >= 1, "mlp: x must have at least 1 dimension, got ", x.sizes());
  check_layer("mlp: fc", fc_weight, fc_bias, x.size(-1));
  check_layer("mlp: proj", proj_weight, proj_bias, fc_weight.size(0));
#if LLMTRAIN_WITH_CUDA
  // Without a gradient (generation) the fused forward pays: GELU in the first product's epilogue. Its
  // backward is what makes the op slower than ATen's when training, hence "mlp" off by default.
  const bool no_grad =
      !at::GradMode::is_enabled() || !(x.requires_grad() || fc_weight.requires_grad() || fc_bias.requires_grad() ||
                                       proj_weight.requires_grad() || proj_bias.requires_grad());
  if (cuda_kernel_enabled(Kernel::kMlp) || (no_grad && cuda_kernel_enabled(Kernel::kLinear))) {
    const auto t = detail::autocast_like_linear({x, fc_weight, fc_bias, proj_weight, proj_bias});
    if (cuda::linear_supported(t[0], t[1], t[2]) && cuda::linear_supported(t[0], t[3], t[4]))
      return cuda::mlp(t[0], t[1], t[2], t[3], t[4]);
  }
#endif
  return ops::linear(ops::gelu(ops::linear(x, fc_weight, fc_bias)), proj_weight, proj_bias);
}

}  // namespace llmtrain::ops
