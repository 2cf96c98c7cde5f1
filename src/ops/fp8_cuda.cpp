// With N rows of x (N, in) and a weight (out, in), in cuBLASLt's column-major terms (linear_cuda.cpp),
// every product reads both operands along k, as Hopper's fp8 products need:
//   y  = x W^T:   D (out x N) = W codes (A, stored in x out) * x codes (B, in x N)
//   dx = dy W:    D (in x N)  = W^T codes (out x in)         * dy codes (out x N)
//   dW = dy^T x:  D (in x out) = x^T codes (N x in)          * dy^T codes (N x out)
// so the forward casts x and W to codes and their transposes (x^T kept for backward, at half the bytes
// of x), and backward casts dy to codes and dy^T. Each cast records its tensor's amax in the history and
// writes its scale's inverse for the product, which cuBLASLt reads from device memory: nothing waits on
// the host, and CUDA graphs capture it.
#include "fp8_cuda.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>

#include "kernels/fp8.cuh"
#include "llmtrain/core/cuda_check.h"
#include "llmtrain/core/error.h"

namespace llmtrain::ops::cuda {
namespace {

at::ScalarType storage(kernels::Fp8Format f) {
  return f == kernels::Fp8Format::kE4M3 ? at::kFloat8_e4m3fn : at::kFloat8_e5m2;
}

// The inverse scales the products read, one per kInvStride floats: cuBLASLt takes 256-byte aligned scale
// pointers only (kernels/matmul.cu).
constexpr int64_t kInvStride = 64;

// Packed x (rows, cols) under scale[row]: its codes and/or their transpose (each if asked for), its amax
// into history[row][0] where `record`, and 1 / scale[row] into inv[row * kInvStride].
void cast(const at::Tensor& x, const Fp8Scaling& s, int64_t row, kernels::Fp8Format format, bool record,
          const at::Tensor& inv, at::Tensor* codes, at::Tensor* codes_t) {
  const int64_t rows = x.size(0), cols = x.size(1);
  kernels::Fp8CastArgs a;
  a.x = x.data_ptr();
  a.dtype = kernel_dtype(x, "fp8_linear: x");
  a.rows = rows;
  a.cols = cols;
  a.format = format;
  a.scale = s.scale.data_ptr<float>() + row;
  if (codes) {
    *codes = at::empty({rows, cols}, x.options().dtype(storage(format)));
    a.codes = static_cast<uint8_t*>(codes->data_ptr());
  }
  if (codes_t) {
    *codes_t = at::empty({cols, rows}, x.options().dtype(storage(format)));
    a.codes_t = static_cast<uint8_t*>(codes_t->data_ptr());
  }
  a.amax = record ? s.amax_history.data_ptr<float>() + row * s.amax_history.size(1) : nullptr;
  a.inv_scale = inv.data_ptr<float>() + row * kInvStride;
  LLMTRAIN_CUDA_CHECK(kernels::launch_fp8_cast(a, at::cuda::getCurrentCUDAStream()));
}

// d (m x n, leading dimension m) = inverse ra * inverse rb * A^T B for codes a stored k x m and b stored k x n
// (column-major, leading dimension k), the layouts of the comment above.
void product(int64_t m, int64_t n, int64_t k, const at::Tensor& a, const at::Tensor& b, const at::Tensor& inv,
             int64_t ra, int64_t rb, at::Tensor& d, const at::Tensor& bias, bool fast) {
  kernels::MatmulArgs x;
  x.m = m;
  x.n = n;
  x.k = k;
  x.trans_a = true;
  x.a = a.data_ptr();
  x.lda = k;
  x.b = b.data_ptr();
  x.ldb = k;
  x.d = d.data_ptr();
  x.ldd = m;
  x.dtype = kernel_dtype(d, "fp8_linear: output");
  x.a_fp8 = a.scalar_type() == at::kFloat8_e4m3fn ? kernels::Fp8Format::kE4M3 : kernels::Fp8Format::kE5M2;
  x.b_fp8 = b.scalar_type() == at::kFloat8_e4m3fn ? kernels::Fp8Format::kE4M3 : kernels::Fp8Format::kE5M2;
  x.a_scale = inv.data_ptr<float>() + ra * kInvStride;
  x.b_scale = inv.data_ptr<float>() + rb * kInvStride;
  x.fast_accum = fast;
  if (bias.defined()) {
    x.epilogue = kernels::Epilogue::kBias;
    x.bias = bias.data_ptr();
    if (lt_launch(x)) return;
    x.epilogue = kernels::Epilogue::kNone;  // no fp8 algorithm with the bias epilogue: the bias added after
    x.bias = nullptr;
  }
  bool done = lt_launch(x);
  if (!done && fast) {
    x.fast_accum = false;
    done = lt_launch(x);
  }
  LLMTRAIN_CHECK(done, "fp8_linear: cuBLASLt has no fp8 algorithm for (", m, " x ", k, ") by (", k, " x ", n, ") of ",
                 a.scalar_type(), " and ", b.scalar_type(), " into ", d.scalar_type());
  if (bias.defined()) d.add_(bias);
}

struct Fp8LinearCudaFn : torch::autograd::Function<Fp8LinearCudaFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, const at::Tensor& history, const at::Tensor& scale, bool record,
                            bool first_pass) {
    const Fp8Scaling s{history, scale};
    const int64_t in = weight.size(1), out = weight.size(0), N = x.numel() / in;
    const at::Tensor xp = packed(x).view({N, in}), wp = packed(weight);
    const at::Tensor inv = at::empty({3 * kInvStride}, scale.options());
    // A training pass (record) keeps the transposes for backward; evaluation casts only what y needs.
    at::Tensor qx, qx_t, qw, qw_t;
    cast(xp, s, 0, kernels::Fp8Format::kE4M3, record, inv, &qx, record ? &qx_t : nullptr);
    cast(wp, s, 1, kernels::Fp8Format::kE4M3, record, inv, &qw, record ? &qw_t : nullptr);
    at::Tensor y = at::empty({N, out}, x.options());
    product(out, N, in, qw, qx, inv, 1, 0, y, bias.numel() > 0 ? packed(bias) : at::Tensor(), /*fast=*/true);
    ctx->save_for_backward({qx_t, qw_t, history, scale, inv});
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    ctx->saved_data["first_pass"] = first_pass;
    auto sizes = x.sizes().vec();
    sizes.back() = out;
    return y.view(sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &qx_t = saved[0], &qw_t = saved[1], &inv = saved[4];
    LLMTRAIN_CHECK(qx_t.defined() && qw_t.defined(), "fp8_linear: backward through a pass taken without grad mode");
    const Fp8Scaling s{saved[2], saved[3]};
    const int64_t in = qw_t.size(0), out = qw_t.size(1), N = qx_t.size(1);
    const at::Tensor dyp = packed(grads[0]).view({N, out});
    if (ctx->saved_data["first_pass"].toBool()) fp8_first_scale(s, 2, dyp);
    const bool need_dx = ctx->needs_input_grad(0), need_dw = ctx->needs_input_grad(1);
    at::Tensor qdy, qdy_t, dx, dw, db;
    cast(dyp, s, 2, kernels::Fp8Format::kE5M2, /*record=*/true, inv, need_dx ? &qdy : nullptr,
         need_dw ? &qdy_t : nullptr);
    if (need_dx) {
      dx = at::empty({N, in}, dyp.options());
      product(in, N, out, qw_t, qdy, inv, 1, 2, dx, {}, /*fast=*/false);
      auto sizes = grads[0].sizes().vec();
      sizes.back() = in;
      dx = dx.view(sizes);
    }
    if (need_dw) {
      dw = at::empty({out, in}, dyp.options());
      product(in, out, N, qx_t, qdy_t, inv, 0, 2, dw, {}, /*fast=*/false);
    }
    if (ctx->needs_input_grad(2) && ctx->saved_data["has_bias"].toBool())
      db = dyp.sum(0, /*keepdim=*/false, at::kFloat).to(dyp.scalar_type());
    return {dx, dw, db, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool fp8_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const Fp8Scaling& s) {
  if (!x.is_cuda() || !weight.is_cuda() || (bias.defined() && !bias.is_cuda())) return false;
  const auto t = x.scalar_type();
  if (!(t == at::kBFloat16 || t == at::kHalf) || weight.scalar_type() != t ||
      (bias.defined() && bias.scalar_type() != t))
    return false;
  const int64_t in = weight.size(1), out = weight.size(0);
  if (in % 16 != 0 || out % 16 != 0 || x.numel() == 0 || (x.numel() / in) % 16 != 0) return false;
  if (s.amax_history.device() != x.device() || s.scale.device() != x.device() || !s.amax_history.is_contiguous() ||
      !s.scale.is_contiguous())
    return false;
  const auto* p = at::cuda::getDeviceProperties(x.device().index());
  return p->major * 10 + p->minor >= 89;
}

at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const Fp8Scaling& s,
                      bool record) {
  const at::Tensor b = bias.defined() ? bias : at::empty({0}, x.options());
  return Fp8LinearCudaFn::apply(x, weight, b, s.amax_history, s.scale, record, s.first_pass);
}

bool fp8_update_supported(const std::vector<Fp8Scaling>& layers) {
  if (layers.empty() || !layers[0].scale.is_cuda()) return false;
  const auto device = layers[0].scale.device();
  const int64_t history = layers[0].amax_history.size(1);
  for (const Fp8Scaling& s : layers)
    if (s.scale.device() != device || s.amax_history.device() != device || !s.scale.is_contiguous() ||
        !s.amax_history.is_contiguous() || s.amax_history.size(1) != history)
      return false;
  return true;
}

void fp8_update_scales(const std::vector<Fp8Scaling>& layers, int64_t margin) {
  const int64_t n = int64_t(layers.size());
  // The pointer tables go over from pinned memory, queued on the stream like the kernel that reads them.
  at::Tensor table = at::empty({2, n}, at::TensorOptions().dtype(at::kLong).pinned_memory(true));
  int64_t* t = table.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    t[i] = reinterpret_cast<int64_t>(layers[size_t(i)].amax_history.data_ptr<float>());
    t[n + i] = reinterpret_cast<int64_t>(layers[size_t(i)].scale.data_ptr<float>());
  }
  const at::Tensor on_device = table.to(layers[0].scale.device(), /*non_blocking=*/true);
  const auto* p = reinterpret_cast<float* const*>(on_device.data_ptr<int64_t>());
  LLMTRAIN_CUDA_CHECK(kernels::launch_fp8_update_scales(p, p + n, int(n), int(layers[0].amax_history.size(1)),
                                                        int(margin), at::cuda::getCurrentCUDAStream()));
}

}  // namespace llmtrain::ops::cuda
