// decode_attention's and rotary's glue: checks that the kernels take the tensors, then one launch on the
// current stream; rotary behind an autograd function whose backward is the inverse rotation.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>

#include <cmath>

#include "attention_cuda.h"
#include "kernels/decode_attention.cuh"
#include "kernels/rotary.cuh"
#include "llmtrain/config.h"
#include "llmtrain/core/cuda_check.h"
#include "llmtrain/core/error.h"
#if LLMTRAIN_WITH_FLASH_ATTENTION
#include "kernels/attention/flash.cuh"
#endif

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

#if LLMTRAIN_WITH_FLASH_ATTENTION
namespace {

kernels::FlashTensor flash_tensor(const at::Tensor& t) { return {t.data_ptr(), t.stride(0), t.stride(1), t.stride(2)}; }

kernels::FlashArgs flash_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  kernels::FlashArgs a;
  a.q = flash_tensor(q);
  a.k = flash_tensor(k);
  a.v = flash_tensor(v);
  a.batch = q.size(0);
  a.heads = q.size(1);
  a.kv_heads = k.size(1);
  a.seqlen = q.size(2);
  a.head_dim = q.size(3);
  a.scale = float(1.0 / std::sqrt(double(a.head_dim)));
  a.dtype = kernels::DType::kBFloat16;
  return a;
}

// Forward on the kernel (bf16, or with fp8 products from e4m3 codes made here) keeping q, k, v, o and
// the rows' log-sum-exp; backward on the bf16 kernel: dq summed in float32 and rounded by its last kernel,
// dk and dv rounded by the kernel (in float32 when a group's heads are summed here).
struct FlashAttentionFn : torch::autograd::Function<FlashAttentionFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& q, const at::Tensor& k,
                            const at::Tensor& v, bool fp8) {
    const int64_t B = q.size(0), H = q.size(1), T = q.size(2), D = q.size(3);
    at::Tensor out = at::empty({B, T, H, D}, q.options()).transpose(1, 2);
    at::Tensor lse = at::empty({B, H, T}, q.options().dtype(at::kFloat));
    kernels::FlashArgs a = flash_args(q, k, v);
    a.o = out.data_ptr();
    a.o_batch_stride = out.stride(0);
    a.o_head_stride = out.stride(1);
    a.o_row_stride = out.stride(2);
    a.lse = lse.data_ptr<float>();
    const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
    if (fp8) {
      const int64_t KV = k.size(1);
      const auto bytes = q.options().dtype(at::kByte), f32 = q.options().dtype(at::kFloat);
      at::Tensor q8 = at::empty({B, H, T, D}, bytes), k8 = at::empty({B, KV, T, D}, bytes);
      at::Tensor vt8 = at::empty({B, KV, D, kernels::flash_fp8_keys(T)}, bytes);
      at::Tensor q_descale = at::empty({B, H}, f32), k_descale = at::empty({B, KV}, f32);
      at::Tensor v_descale = at::empty({B, KV}, f32);
      const kernels::FlashFp8 codes{q8.data_ptr(),
                                    k8.data_ptr(),
                                    vt8.data_ptr(),
                                    q_descale.data_ptr<float>(),
                                    k_descale.data_ptr<float>(),
                                    v_descale.data_ptr<float>()};
      LLMTRAIN_CUDA_CHECK(kernels::launch_flash_fp8_quantize(a, codes, stream));
      LLMTRAIN_CUDA_CHECK(kernels::launch_flash_fp8_forward(a, codes, stream));
    } else {
      LLMTRAIN_CUDA_CHECK(kernels::launch_flash_forward(a, stream));
    }
    ctx->save_for_backward({q, k, v, out, lse});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &q = saved[0], &k = saved[1], &v = saved[2], &out = saved[3], &lse = saved[4];
    at::Tensor dout = grads[0];
    if (dout.stride(3) != 1 || !kernels::flash_fits(flash_tensor(dout)))
      dout = dout.transpose(1, 2).contiguous().transpose(1, 2);  // (B, T, H, D) storage, as o's
    const int64_t B = q.size(0), H = q.size(1), KV = k.size(1), T = q.size(2), D = q.size(3);
    // Under at::globalContext().deterministicAlgorithms(), dq's shares are stored apart and summed in a
    // fixed order (memory: one float32 dq per 128 keys) instead of added in no fixed order.
    const bool deterministic = at::globalContext().deterministicAlgorithms();
    const auto f32 = q.options().dtype(at::kFloat);
    kernels::FlashBackwardArgs a;
    a.forward = flash_args(q, k, v);
    const at::Tensor dq_accum = at::empty({kernels::flash_dq_accum_floats(a.forward, deterministic)}, f32);
    at::Tensor dq = at::empty({B, T, H, D}, q.options()).transpose(1, 2);  // (B, T, H, D) storage, as o's
    // Without groups to sum, the kernel rounds dk and dv to bf16 itself.
    const bool grouped_heads = KV != H;
    const auto dkv_options = grouped_heads ? f32 : q.options();
    at::Tensor dk = at::empty({B, H, T, D}, dkv_options), dv = at::empty({B, H, T, D}, dkv_options);
    const at::Tensor delta = at::empty({kernels::flash_delta_floats(a.forward)}, f32);
    a.forward.o = out.data_ptr();
    a.forward.o_batch_stride = out.stride(0);
    a.forward.o_head_stride = out.stride(1);
    a.forward.o_row_stride = out.stride(2);
    a.forward.lse = lse.data_ptr<float>();
    a.dout = flash_tensor(dout);
    a.delta = delta.data_ptr<float>();
    a.dq_accum = dq_accum.data_ptr<float>();
    a.deterministic = deterministic;
    a.dq = dq.data_ptr();
    a.dq_batch_stride = dq.stride(0);
    a.dq_head_stride = dq.stride(1);
    a.dq_row_stride = dq.stride(2);
    a.dk = dk.data_ptr();
    a.dv = dv.data_ptr();
    a.bf16_dkv = !grouped_heads;
    LLMTRAIN_CUDA_CHECK(kernels::launch_flash_backward(a, at::cuda::getCurrentCUDAStream()));
    // A key/value head's gradient is the sum over the query heads of its group.
    const auto grouped = [&](const at::Tensor& g) { return grouped_heads ? g.view({B, KV, H / KV, T, D}).sum(2) : g; };
    return {dq, grouped(dk).to(k.scalar_type()), grouped(dv).to(v.scalar_type()), at::Tensor()};
  }
};

}  // namespace

bool flash_attention_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v) {
  if (!q.is_cuda() || k.device() != q.device() || v.device() != q.device() || q.scalar_type() != at::kBFloat16 ||
      k.scalar_type() != at::kBFloat16 || v.scalar_type() != at::kBFloat16 || q.stride(3) != 1 || k.stride(3) != 1 ||
      v.stride(3) != 1)
    return false;
  if (at::cuda::getCurrentDeviceProperties()->major != 9) return false;
  kernels::FlashArgs a = flash_args(q, k, v);
  a.o = q.data_ptr();  // the output is made to fit: only its alignment is asked here
  return kernels::flash_fits(a);
}

at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool fp8) {
  return FlashAttentionFn::apply(q, k, v, fp8);
}
#else
bool flash_attention_supported(const at::Tensor&, const at::Tensor&, const at::Tensor&) { return false; }
at::Tensor flash_attention(const at::Tensor&, const at::Tensor&, const at::Tensor&, bool) {
  LLMTRAIN_CHECK(false, "attention: this build has no flash-attention kernel (LLMTRAIN_FLASH_ATTENTION=OFF)");
  return {};
}
#endif

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
