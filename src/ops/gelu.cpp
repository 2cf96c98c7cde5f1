#include "llmtrain/ops/gelu.h"

#include <ATen/ATen.h>

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
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

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) {
  LLMTRAIN_CHECK(gate.sizes() == up.sizes(), "swiglu: gate ", gate.sizes(), " and up ", up.sizes(),
                 " must have one shape");
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kSwiGLU) && cuda::swiglu_supported(gate, up)) return cuda::swiglu(gate, up);
#endif
  return at::silu(gate) * up;
}

}  // namespace llmtrain::ops
