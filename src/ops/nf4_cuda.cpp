#include "nf4_cuda.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "kernels/nf4.cuh"
#include "llmtrain/core/cuda_check.h"
#include "llmtrain/core/error.h"
#include "tables.h"

namespace llmtrain::ops::cuda {
namespace {

kernels::NF4Args args_of(const NF4Weight& q) {
  const at::Device device = q.packed.device();
  LLMTRAIN_CHECK(q.packed.is_contiguous() && q.absmax_codes.is_contiguous() && q.absmax2.is_contiguous() &&
                     q.absmax_codes.device() == device && q.absmax2.device() == device &&
                     q.absmax2.scalar_type() == at::kFloat,
                 "nf4: the weight's tensors must be contiguous, on one device, the second-level scales float32");
  kernels::NF4Args a;
  a.packed = q.packed.data_ptr<uint8_t>();
  a.absmax_codes = q.absmax_codes.data_ptr<uint8_t>();
  a.absmax2 = q.absmax2.data_ptr<float>();
  a.offset = float(q.offset);
  a.levels = detail::table_on(nf4_levels(), device).data_ptr<float>();
  a.dynamic = detail::table_on(dynamic_map(), device).data_ptr<float>();
  a.numel = q.numel();
  return a;
}

}  // namespace

at::Tensor nf4_dequantize(const NF4Weight& q, at::ScalarType dtype) {
  at::Tensor out = at::empty(q.shape, q.packed.options().dtype(dtype));
  const auto a = args_of(q);
  if (!aligned(a.packed, 8)) return {};  // a view into a packed buffer: the reference takes it
  LLMTRAIN_CUDA_CHECK(kernels::launch_nf4_dequantize(a, kernel_dtype(out, "nf4_dequantize: dtype"), out.data_ptr(),
                                                     at::cuda::getCurrentCUDAStream()));
  return out;
}

at::Tensor nf4_gemv(const at::Tensor& x, const NF4Weight& q, const at::Tensor& bias) {
  const int64_t K = q.shape[1], N = q.shape[0], M = x.numel() / K;
  if (!x.is_cuda() || (x.scalar_type() != at::kBFloat16 && x.scalar_type() != at::kHalf) ||
      !kernels::nf4_gemv_fits(M, K, kernel_dtype(x, "nf4_linear: x")) ||
      (bias.defined() && bias.scalar_type() != x.scalar_type()))
    return {};
  const at::Tensor xs = packed(x.reshape({M, K}));
  const auto a = args_of(q);
  if (!aligned(a.packed, 16)) return {};
  const at::Tensor b = bias.defined() ? bias.contiguous() : at::Tensor();
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = N;
  at::Tensor y = at::empty(shape, x.options());
  LLMTRAIN_CUDA_CHECK(kernels::launch_nf4_gemv(a, M, N, K, kernel_dtype(x, "nf4_linear: x"), xs.data_ptr(),
                                               b.defined() ? b.data_ptr() : nullptr, y.data_ptr(),
                                               at::cuda::getCurrentCUDAStream()));
  return y;
}

}  // namespace llmtrain::ops::cuda
