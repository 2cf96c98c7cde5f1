// The MLP's glue: its products on cuBLASLt (linear_cuda.cpp has the layout), with the epilogues that
// fold the bias adds, GELU and GELU's gradient into them, and the autograd function.
#include <ATen/ATen.h>
#include <torch/autograd.h>

#include "linear_cuda.h"
#include "llmtrain/core/error.h"

namespace llmtrain::ops::cuda {
namespace {

using kernels::Epilogue;

void matmul(int64_t m, int64_t n, int64_t k, const at::Tensor& a, int64_t lda, bool trans_a, const at::Tensor& b,
            int64_t ldb, bool trans_b, at::Tensor& d, Epilogue epilogue, const at::Tensor& bias = {},
            const at::Tensor& aux = {}) {
  LLMTRAIN_CHECK(lt_matmul(m, n, k, a, lda, trans_a, b, ldb, trans_b, d, epilogue, bias, aux),
                 "mlp: cuBLASLt has no algorithm for a ", m, " x ", n, " x ", k, " product of ", d.scalar_type(),
                 " with epilogue ", int(epilogue));
}

// x (N, in) -> y (N, out) = x W^T + b, or with kGeluAuxBias gelu of it, the pre-activation into aux.
at::Tensor product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, Epilogue epilogue,
                   const at::Tensor& aux = {}) {
  at::Tensor y;
  LLMTRAIN_CHECK(forward_product(x, w, b, epilogue, y, aux), "mlp: cuBLASLt has no algorithm for a ", w.size(0), " x ",
                 x.numel() / w.size(1), " x ", w.size(1), " product of ", x.scalar_type(), " with epilogue ",
                 int(epilogue));
  return y;
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
    const at::Tensor x = packed(x_in), fw = packed(fc_w), fb = packed(fc_b), pw = packed(proj_w), pb = packed(proj_b);
    auto sizes = x.sizes().vec();
    sizes.back() = fw.size(0);
    at::Tensor h = at::empty(sizes, x.options());                        // (..., H) pre-activation
    const at::Tensor g = product(x, fw, fb, Epilogue::kGeluAuxBias, h);  // (..., H)
    ctx->save_for_backward({x, fw, pw, h, g});
    return product(g, pw, pb, Epilogue::kBias);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &fw = saved[1], &pw = saved[2], &h = saved[3], &g = saved[4];
    const at::Tensor dy = packed(grads[0].to(x.scalar_type()));
    at::Tensor dpw = at::empty_like(pw), dpb = at::empty({pw.size(0)}, pw.options());
    linear_weight_grads(g, dy, dpw, &dpb);
    at::Tensor dfb = at::empty({fw.size(0)}, fw.options());
    const at::Tensor dh = input_grad(dy, pw, Epilogue::kDGeluBGrad, dfb, h);  // (..., H)
    at::Tensor dfw = at::empty_like(fw);
    linear_weight_grads(x, dh, dfw, nullptr);
    return {input_grad(dh, fw), dfw, dfb, dpw, dpb};
  }
};

}  // namespace

at::Tensor mlp(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
               const at::Tensor& proj_weight, const at::Tensor& proj_bias) {
  return MlpFn::apply(x, fc_weight, fc_bias, proj_weight, proj_bias);
}

}  // namespace llmtrain::ops::cuda
