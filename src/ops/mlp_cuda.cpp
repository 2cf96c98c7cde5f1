// The MLP's glue: row-major tensors as cuBLASLt's column-major matrices (a row-major (r, c) tensor is
// a c x r matrix), ATen's cuBLASLt handle and workspace, and the autograd function. With N rows of x
// (N, in) and a weight (out, in):
//   y  (N, out) = x W^T:     D = y^T  (out x N)  = op_T(W^T stored in x out) * x^T (in x N)
//   dx (N, in)  = dy W:      D = dx^T (in x N)   = W^T (in x out) * dy^T (out x N)
//   dW (out, in) = dy^T x:   D = dW^T (in x out) = x^T (in x N) * op_T(dy^T stored out x N)
// The weight products' bias gradients are ATen column sums: cuBLASLt's BGRADB epilogue was slower
// than a product plus a separate sum on the H200.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>

#include "../../kernels/matmul.cuh"
#include "cuda_ops.h"
#include "llmtrain/core/cuda_check.h"

namespace llmtrain::ops::cuda {
namespace {

using kernels::Epilogue;

// Queues D = op(A) op(B) with an epilogue; the tensors are contiguous and 16-byte aligned (packed()).
void matmul(int64_t m, int64_t n, int64_t k, const at::Tensor& a, int64_t lda, bool trans_a, const at::Tensor& b,
            int64_t ldb, bool trans_b, at::Tensor& d, Epilogue epilogue = Epilogue::kNone,
            const at::Tensor& bias = {}, const at::Tensor& aux = {}) {
  kernels::MatmulArgs x;
  x.m = m;
  x.n = n;
  x.k = k;
  x.a = a.data_ptr();
  x.lda = lda;
  x.trans_a = trans_a;
  x.b = b.data_ptr();
  x.ldb = ldb;
  x.trans_b = trans_b;
  x.d = d.data_ptr();
  x.ldd = m;
  x.dtype = kernel_dtype(d, "linear: tensors");
  x.epilogue = epilogue;
  x.bias = bias.defined() ? bias.data_ptr() : nullptr;
  x.aux = aux.defined() ? aux.data_ptr() : nullptr;
  LLMTRAIN_CUBLAS_CHECK(kernels::launch_matmul(at::cuda::getCurrentCUDABlasLtHandle(), x,
                                               at::cuda::getCUDABlasLtWorkspace(),
                                               at::cuda::getCUDABlasLtWorkspaceSize(),
                                               at::cuda::getCurrentCUDAStream()));
}

// x (N, in) -> y (N, out) = x W^T + b, or with kGeluAuxBias gelu of it, the pre-activation into aux.
at::Tensor forward_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Epilogue epilogue,
                           const at::Tensor& aux = {}) {
  const int64_t in = w.size(1), out = w.size(0), N = x.numel() / in;
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  at::Tensor y = at::empty(sizes, x.options());
  matmul(out, N, in, w, in, /*trans_a=*/true, x, in, false, y, epilogue, b, aux);
  return y;
}

// dW = dy^T x, and db = the column sums of dy when asked for.
void weight_grads(const at::Tensor& x, const at::Tensor& dy, at::Tensor& dw, at::Tensor* db) {
  const int64_t in = dw.size(1), out = dw.size(0), N = x.numel() / in;
  matmul(in, out, N, x, in, false, dy, out, /*trans_b=*/true, dw);
  if (db) *db = dy.reshape({N, out}).sum(0);
}

// dx = dy W, or with kDGeluBGrad (dy W) * gelu'(aux), the bias gradient of the layer before into db.
at::Tensor input_grad(const at::Tensor& dy, const at::Tensor& w, Epilogue epilogue = Epilogue::kNone,
                      const at::Tensor& db = {}, const at::Tensor& aux = {}) {
  const int64_t in = w.size(1), out = w.size(0), N = dy.numel() / out;
  auto sizes = dy.sizes().vec();
  sizes.back() = in;
  at::Tensor dx = at::empty(sizes, dy.options());
  matmul(in, N, out, w, in, false, dy, out, false, dx, epilogue, db, aux);
  return dx;
}

// fc (H, C), proj (C, H): h = x fc^T + fc_b (kept for backward), g = gelu(h), y = g proj^T + proj_b.
struct MlpFn : torch::autograd::Function<MlpFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in,  // (..., C)
                            const at::Tensor& fc_w, const at::Tensor& fc_b, const at::Tensor& proj_w,
                            const at::Tensor& proj_b) {
    const at::Tensor x = packed(x_in), fw = packed(fc_w), fb = packed(fc_b), pw = packed(proj_w),
                     pb = packed(proj_b);
    auto sizes = x.sizes().vec();
    sizes.back() = fw.size(0);
    at::Tensor h = at::empty(sizes, x.options());                   // (..., H) pre-activation
    const at::Tensor g = forward_product(x, fw, fb, Epilogue::kGeluAuxBias, h);  // (..., H)
    ctx->save_for_backward({x, fw, pw, h, g});
    return forward_product(g, pw, pb, Epilogue::kBias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &fw = saved[1], &pw = saved[2], &h = saved[3], &g = saved[4];
    const at::Tensor dy = packed(grads[0].to(x.scalar_type()));
    at::Tensor dpw = at::empty_like(pw), dpb;
    weight_grads(g, dy, dpw, &dpb);
    at::Tensor dfb = at::empty({fw.size(0)}, fw.options());
    const at::Tensor dh = input_grad(dy, pw, Epilogue::kDGeluBGrad, dfb, h);  // (..., H)
    at::Tensor dfw = at::empty_like(fw);
    weight_grads(x, dh, dfw, nullptr);
    return {input_grad(dh, fw), dfw, dfb, dpw, dpb};
  }
};

}  // namespace

bool mlp_layer_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const auto t = x.scalar_type();
  return x.is_cuda() && weight.is_cuda() && bias.is_cuda() && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) &&
         weight.scalar_type() == t && bias.scalar_type() == t && x.numel() > 0 && weight.size(0) % 8 == 0 &&
         weight.size(1) % 8 == 0;
}

at::Tensor mlp(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
               const at::Tensor& proj_weight, const at::Tensor& proj_bias) {
  return MlpFn::apply(x, fc_weight, fc_bias, proj_weight, proj_bias);
}

}  // namespace llmtrain::ops::cuda
