// decode_attention's glue: checks that the kernel takes the tensors, then one launch on the current stream.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include "attention_cuda.h"
#include "kernels/decode_attention.cuh"
#include "llmtrain/core/cuda_check.h"

namespace llmtrain::ops::cuda {
namespace {
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }
}  // namespace

bool decode_attention_supported(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache) {
  const auto t = qkv.scalar_type();
  if (!qkv.is_cuda() || !(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf)) return false;
  if (!k_cache.is_contiguous() || !v_cache.is_contiguous() || qkv.stride(1) != 1) return false;
  const int64_t bytes = int64_t(qkv.element_size());
  return kernels::decode_attention_fits(kernel_dtype(qkv, "decode_attention: qkv"), k_cache.size(3)) &&
         k_cache.size(0) <= 65535 && aligned16(qkv.data_ptr()) && (qkv.stride(0) * bytes) % 16 == 0 &&
         aligned16(k_cache.data_ptr()) && aligned16(v_cache.data_ptr());
}

at::Tensor decode_attention(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& positions, int64_t window) {
  const int64_t B = k_cache.size(0), KV = k_cache.size(1), S = k_cache.size(2), D = k_cache.size(3);
  const int64_t H = qkv.size(1) / D - 2 * KV;
  const at::Tensor pos = positions.contiguous();
  at::Tensor out = at::empty({B, H * D}, qkv.options());  // (B, H D)
  LLMTRAIN_CUDA_CHECK(kernels::launch_decode_attention(qkv.data_ptr(), qkv.stride(0), k_cache.data_ptr(),
                                                       v_cache.data_ptr(), pos.data_ptr<int64_t>(),
                                                       kernel_dtype(qkv, "decode_attention: qkv"), B, H, KV, S, D,
                                                       window, out.data_ptr(), at::cuda::getCurrentCUDAStream()));
  return out;
}

}  // namespace llmtrain::ops::cuda
