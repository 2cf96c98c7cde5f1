// decode_attention's and rotary's glue: checks that the kernels take the tensors, then one launch on the
// current stream; rotary behind an autograd function whose backward is the inverse rotation.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>

#include "attention_cuda.h"
#include "kernels/decode_attention.cuh"
#include "kernels/rotary.cuh"
#include "llmtrain/core/cuda_check.h"

namespace llmtrain::ops::cuda {

bool decode_attention_supported(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache) {
  const auto t = qkv.scalar_type();
  if (!qkv.is_cuda() || !(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf)) return false;
  if (!k_cache.is_contiguous() || !v_cache.is_contiguous() || qkv.stride(1) != 1) return false;
  const int64_t bytes = int64_t(qkv.element_size());
  return kernels::decode_attention_fits(kernel_dtype(qkv, "decode_attention: qkv"), k_cache.size(3)) &&
         k_cache.size(0) <= 65535 && aligned(qkv.data_ptr(), 16) && (qkv.stride(0) * bytes) % 16 == 0 &&
         aligned(k_cache.data_ptr(), 16) && aligned(v_cache.data_ptr(), 16);
}

at::Tensor decode_attention(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& positions, int64_t window, const at::Tensor& inv_freq) {
  const int64_t B = k_cache.size(0), KV = k_cache.size(1), S = k_cache.size(2), D = k_cache.size(3);
  const int64_t H = qkv.size(1) / D - 2 * KV;
  const at::Tensor pos = positions.contiguous(), freq = inv_freq.defined() ? inv_freq.contiguous() : at::Tensor();
  at::Tensor out = at::empty({B, H * D}, qkv.options());  // (B, H D)
  LLMTRAIN_CUDA_CHECK(kernels::launch_decode_attention(
      qkv.data_ptr(), qkv.stride(0), k_cache.data_ptr(), v_cache.data_ptr(), pos.data_ptr<int64_t>(),
      kernel_dtype(qkv, "decode_attention: qkv"), B, H, KV, S, D, window,
      freq.defined() ? freq.data_ptr<float>() : nullptr, out.data_ptr(), at::cuda::getCurrentCUDAStream()));
  return out;
}

namespace {

// Rotates x (B, T, heads, D) contiguous by the tables' angles, or against them with `inverse`.
at::Tensor rotate(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin, bool inverse) {
  at::Tensor y = at::empty_like(x);
  LLMTRAIN_CUDA_CHECK(kernels::launch_rotary(x.data_ptr(), cos.data_ptr<float>(), sin.data_ptr<float>(),
                                             cos.size(0) != 1, inverse, kernel_dtype(x, "rotary: x"), x.size(0),
                                             x.size(1), x.size(2), x.size(3), y.data_ptr(),
                                             at::cuda::getCurrentCUDAStream()));
  return y;
}

struct RotaryFn : torch::autograd::Function<RotaryFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& cos_in,
                            const at::Tensor& sin_in) {
    const at::Tensor cos = packed(cos_in), sin = packed(sin_in);
    ctx->save_for_backward({cos, sin});
    return rotate(packed(x), cos, sin, /*inverse=*/false);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor dy = packed(grads[0]);
    return {rotate(dy, saved[0], saved[1], /*inverse=*/true), {}, {}};
  }
};

}  // namespace

bool rotary_supported(const at::Tensor& x) {
  const auto t = x.scalar_type();
  return x.is_cuda() && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) &&
         kernels::rotary_fits(kernel_dtype(x, "rotary: x"), x.size(3));
}

at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  return RotaryFn::apply(x, cos, sin);
}

}  // namespace llmtrain::ops::cuda
