// Layer norm's glue: the CUDA kernels behind an autograd function that keeps the row means and
// reciprocal standard deviations (2N floats) for backward.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>

#include "../../kernels/layer_norm.cuh"
#include "cuda_ops.h"
#include "llmtrain/core/cuda_check.h"
#include "llmtrain/core/error.h"

namespace llmtrain::ops::cuda {
namespace {

struct LayerNormFn : torch::autograd::Function<LayerNormFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in,  // (..., C)
                            const at::Tensor& weight, const at::Tensor& bias,               // (C)
                            double eps) {
    const at::Tensor x = x_in.contiguous();
    const int64_t C = x.size(-1), N = x.numel() / C;
    at::Tensor out = at::empty_like(x);
    const auto f32 = x.options().dtype(at::kFloat);
    at::Tensor mean = at::empty({N}, f32), rstd = at::empty({N}, f32);
    LLMTRAIN_CUDA_CHECK(kernels::launch_layer_norm_fwd(
        x.data_ptr(), weight.data_ptr(), bias.data_ptr(), kernel_dtype(x, "layer_norm: x"),
        kernel_dtype(weight, "layer_norm: weight"), N, C, float(eps), out.data_ptr(), mean.data_ptr<float>(),
        rstd.data_ptr<float>(), at::cuda::getCurrentCUDAStream()));
    ctx->save_for_backward({x, weight, mean, rstd});
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &x = saved[0], &weight = saved[1], &mean = saved[2], &rstd = saved[3];
    const at::Tensor dout = grads[0].to(x.scalar_type()).contiguous();
    const int64_t C = x.size(-1), N = x.numel() / C, blocks = kernels::layer_norm_bwd_blocks(N);
    at::Tensor dx = at::empty_like(x), dweight = at::empty_like(weight), dbias = at::empty_like(weight);
    const auto f32 = x.options().dtype(at::kFloat);
    at::Tensor pdw = at::empty({blocks, C}, f32), pdb = at::empty({blocks, C}, f32);  // (blocks, C) each
    const auto stream = at::cuda::getCurrentCUDAStream();
    const auto dt = kernel_dtype(x, "layer_norm: x"), wdt = kernel_dtype(weight, "layer_norm: weight");
    LLMTRAIN_CUDA_CHECK(kernels::launch_layer_norm_bwd(
        dout.data_ptr(), x.data_ptr(), weight.data_ptr(), mean.data_ptr<float>(), rstd.data_ptr<float>(), dt, wdt, N, C,
        dx.data_ptr(), pdw.data_ptr<float>(), pdb.data_ptr<float>(), stream));
    LLMTRAIN_CUDA_CHECK(kernels::launch_layer_norm_bwd_finish(pdw.data_ptr<float>(), pdb.data_ptr<float>(), blocks, C,
                                                              wdt, dweight.data_ptr(), dbias.data_ptr(), stream));
    return {dx, dweight, dbias, at::Tensor()};
  }
};

}  // namespace

bool layer_norm_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const auto t = x.scalar_type(), w = weight.scalar_type();
  const bool types = (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) && (w == t || w == at::kFloat) &&
                     bias.scalar_type() == w;
  return x.is_cuda() && weight.is_cuda() && bias.is_cuda() && types && weight.is_contiguous() && bias.is_contiguous() &&
         x.numel() > 0 && x.size(-1) <= kernels::kLayerNormMaxC;
}

at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps) {
  return LayerNormFn::apply(x, weight, bias, eps);
}

}  // namespace llmtrain::ops::cuda
