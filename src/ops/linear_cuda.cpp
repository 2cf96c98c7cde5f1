// The products' glue: row-major tensors as cuBLASLt's column-major matrices (a row-major (r, c) tensor
// is a c x r matrix), ATen's cuBLASLt handle and workspace, and the linear layer's autograd function.
// With N rows of x (N, in) and a weight (out, in):
//   y  (N, out) = x W^T:     D = y^T  (out x N)  = op_T(W^T stored in x out) * x^T (in x N)
//   dx (N, in)  = dy W:      D = dx^T (in x N)   = W^T (in x out) * dy^T (out x N)
//   dW (out, in) = dy^T x:   D = dW^T (in x out) = x^T (in x N) * op_T(dy^T stored out x N)
// The linear layer keeps ATen's products for y (its cuBLASLt bias epilogue) and dx when training, on flattened,
// packed rows, so that no strided input takes ATen's slower matmul-then-add path; dW comes with the bias
// gradient in its epilogue (BGRADB), which saves a column-sum pass over dy.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>

#include "kernels/gemv.cuh"
#include "linear_cuda.h"
#include "llmtrain/core/cuda_check.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"

namespace llmtrain::ops::cuda {

bool lt_launch(const kernels::MatmulArgs& args) {
  const cublasStatus_t status =
      kernels::launch_matmul(at::cuda::getCurrentCUDABlasLtHandle(), args, at::cuda::getCUDABlasLtWorkspace(),
                             at::cuda::getCUDABlasLtWorkspaceSize(), at::cuda::getCurrentCUDAStream());
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  LLMTRAIN_CUBLAS_CHECK(status);
  return true;
}

bool lt_matmul(int64_t m, int64_t n, int64_t k, const at::Tensor& a, int64_t lda, bool trans_a, const at::Tensor& b,
               int64_t ldb, bool trans_b, at::Tensor& d, kernels::Epilogue epilogue, const at::Tensor& bias,
               const at::Tensor& aux) {
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
  return lt_launch(x);
}

void linear_weight_grads(const at::Tensor& x, const at::Tensor& dy, at::Tensor& dw, at::Tensor* db) {
  const int64_t in = dw.size(1), out = dw.size(0), N = x.numel() / in;
  if (db && lt_matmul(in, out, N, x, in, false, dy, out, /*trans_b=*/true, dw, kernels::Epilogue::kBGradB, *db)) return;
  LLMTRAIN_CHECK(lt_matmul(in, out, N, x, in, false, dy, out, /*trans_b=*/true, dw), "linear: cuBLASLt has no ",
                 "algorithm for the weight gradient (", out, ", ", in, ") over ", N, " rows of ", dy.scalar_type());
  if (db) *db = dy.reshape({N, out}).sum(0);  // no BGRADB algorithm for this shape
}

bool forward_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, kernels::Epilogue epilogue,
                     at::Tensor& y, const at::Tensor& aux) {
  const int64_t in = w.size(1), out = w.size(0), N = x.numel() / in;
  auto sizes = x.sizes().vec();
  sizes.back() = out;
  y = at::empty(sizes, x.options());
  return lt_matmul(out, N, in, w, in, /*trans_a=*/true, x, in, false, y, epilogue, b, aux);
}

bool linear_gelu_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::Tensor& y) {
  const at::Tensor xp = packed(x);
  const at::Tensor aux = at::empty({xp.numel() / weight.size(1), weight.size(0)}, xp.options());
  return forward_product(xp, packed(weight), packed(bias), kernels::Epilogue::kGeluAuxBias, y, aux);
}

bool gemv(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& ln_weight, const at::Tensor& ln_bias,
          double eps, at::TensorList weights, at::TensorList biases, kernels::GemvAct act, at::Tensor& sum,
          at::Tensor& y) {
  const int64_t parts = int64_t(weights.size());
  if (parts < 1 || parts > kernels::kGemvMaxParts || !(biases.empty() || int64_t(biases.size()) == parts)) return false;
  const int64_t K = weights[0].size(1), M = x.numel() / std::max<int64_t>(K, 1);
  const auto t = x.scalar_type();
  if (!(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) || !kernels::gemv_fits(kernel_dtype(x, "gemv"), M, K))
    return false;
  const auto usable = [&](const at::Tensor& o) {
    return !o.defined() || (o.is_cuda() && o.scalar_type() == t && o.device() == x.device());
  };
  for (const at::Tensor* o : {&x, &delta, &ln_weight, &ln_bias})
    if (!usable(*o)) return false;
  for (const at::Tensor& o : weights)
    if (!usable(o) || !o.defined() || o.size(1) != K) return false;
  for (const at::Tensor& o : biases)
    if (!usable(o)) return false;
  kernels::GemvArgs a;
  std::vector<at::Tensor> held;  // the packed operands, alive until the launch
  int64_t N = 0;
  a.parts = int(parts);
  for (int64_t i = 0; i < parts; ++i) {
    held.push_back(packed(weights[i]));
    a.w[i] = held.back().data_ptr();
    a.n[i] = weights[i].size(0);
    N += a.n[i];
    if (!biases.empty() && biases[i].defined()) {
      held.push_back(biases[i].contiguous());
      a.bias[i] = held.back().data_ptr();
    }
  }
  if (act == kernels::GemvAct::kSwiGLU) N = a.n[0];
  const at::Tensor xp = packed(x), dp = delta.defined() ? packed(delta) : at::Tensor();
  auto sizes = x.sizes().vec();
  sizes.back() = N;
  y = at::empty(sizes, x.options());
  sum = delta.defined() ? at::empty_like(xp) : x;
  a.M = M;
  a.K = K;
  a.dtype = kernel_dtype(x, "gemv");
  a.x = xp.data_ptr();
  a.delta = dp.defined() ? dp.data_ptr() : nullptr;
  a.sum = dp.defined() ? sum.data_ptr() : nullptr;
  const at::Tensor gw = ln_weight.defined() ? ln_weight.contiguous() : at::Tensor(),
                   gb = ln_bias.defined() ? ln_bias.contiguous() : at::Tensor();
  a.ln_weight = gw.defined() ? gw.data_ptr() : nullptr;
  a.ln_bias = gb.defined() ? gb.data_ptr() : nullptr;
  a.eps = float(eps);
  a.act = act;
  a.y = y.data_ptr();
  LLMTRAIN_CUDA_CHECK(kernels::launch_gemv(a, at::cuda::getCurrentCUDAStream()));
  return true;
}

namespace {

struct LinearFn : torch::autograd::Function<LinearFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in,  // (..., in)
                            const at::Tensor& w_in, const at::Tensor& b_in) {               // (out, in), (out)
    const at::Tensor x = packed(x_in), w = packed(w_in), b = packed(b_in);
    const int64_t in = w.size(1), out = w.size(0);
    ctx->save_for_backward({x, w});
    auto sizes = x.sizes().vec();
    sizes.back() = out;
    return at::addmm(b, x.view({-1, in}), w.t()).view(sizes);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &w = saved[1];
    const int64_t out = w.size(0);
    const at::Tensor dy = packed(grads[0].to(x.scalar_type()));
    at::Tensor dx;
    if (ctx->needs_input_grad(0)) dx = at::mm(dy.view({-1, out}), w).view(x.sizes());
    at::Tensor dw, db;
    if (ctx->needs_input_grad(1) || ctx->needs_input_grad(2)) {  // none for a frozen layer (LoRA's base)
      dw = at::empty_like(w);
      db = at::empty({out}, w.options());
      linear_weight_grads(x, dy, dw, &db);
    }
    return {dx, dw, db};
  }
};

}  // namespace

bool linear_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const auto t = x.scalar_type();
  return x.is_cuda() && weight.is_cuda() && bias.is_cuda() &&
         (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) && weight.scalar_type() == t &&
         bias.scalar_type() == t && x.numel() > 0 && weight.size(0) % 8 == 0 && weight.size(1) % 8 == 0;
}

at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  // Without a gradient to keep (generation), the bias add is cuBLASLt's epilogue at every row count:
  // ATen's addmm adds it in a pass of its own for a single row, the decode step's shape at batch 1.
  if (!at::GradMode::is_enabled() || !(x.requires_grad() || weight.requires_grad() || bias.requires_grad())) {
    at::Tensor y, x_again;
    if (cuda_kernel_enabled(Kernel::kGemv) &&
        gemv(x, {}, {}, {}, 0.0, {weight}, {bias}, kernels::GemvAct::kNone, x_again, y))
      return y;
    if (forward_product(packed(x), packed(weight), packed(bias), kernels::Epilogue::kBias, y)) return y;
  }
  return LinearFn::apply(x, weight, bias);
}

}  // namespace llmtrain::ops::cuda
