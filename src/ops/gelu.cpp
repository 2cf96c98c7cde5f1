#include "llmtrain/ops/gelu.h"

#include <ATen/ATen.h>

#include "llmtrain/config.h"
#include "llmtrain/ops/dispatch.h"
#if LLMTRAIN_WITH_CUDA
#include "gelu_cuda.h"
#endif

namespace llmtrain::ops {

at::Tensor gelu(const at::Tensor& x) {
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kGelu) && cuda::gelu_supported(x)) return cuda::gelu(x);
#endif
  return at::gelu(x, "tanh");
}

}  // namespace llmtrain::ops
