// What the CUDA glue of every op shares.
#include "cuda_common.h"

#include <cstdint>

#include "llmtrain/core/error.h"

namespace llmtrain::ops::cuda {

kernels::DType kernel_dtype(const at::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case at::kFloat: return kernels::DType::kFloat32;
    case at::kBFloat16: return kernels::DType::kBFloat16;
    case at::kHalf: return kernels::DType::kFloat16;
    default: LLMTRAIN_CHECK(false, what, " of ", t.scalar_type(), " have no CUDA kernel");
  }
  return kernels::DType::kFloat32;
}

at::Tensor packed(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  if (!aligned(c.data_ptr(), 16)) c = c.clone();  // a fresh allocation is aligned
  return c;
}

}  // namespace llmtrain::ops::cuda
