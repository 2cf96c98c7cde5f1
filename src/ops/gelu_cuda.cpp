// GELU's glue: the kernels behind an autograd function that keeps the pre-activation for backward.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>

#include "gelu_cuda.h"
#include "kernels/gelu.cuh"
#include "llmtrain/core/cuda_check.h"

namespace llmtrain::ops::cuda {
namespace {

struct GeluFn : torch::autograd::Function<GeluFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in) {  // any shape
    const at::Tensor x = x_in.contiguous();
    at::Tensor y = at::empty_like(x);
    LLMTRAIN_CUDA_CHECK(kernels::launch_gelu_fwd(x.data_ptr(), kernel_dtype(x, "gelu: x"), x.numel(), y.data_ptr(),
                                                 at::cuda::getCurrentCUDAStream()));
    ctx->save_for_backward({x});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor x = ctx->get_saved_variables()[0];
    const at::Tensor dy = grads[0].to(x.scalar_type()).contiguous();
    at::Tensor dx = at::empty_like(x);
    LLMTRAIN_CUDA_CHECK(kernels::launch_gelu_bwd(dy.data_ptr(), x.data_ptr(), kernel_dtype(x, "gelu: x"), x.numel(),
                                                 dx.data_ptr(), at::cuda::getCurrentCUDAStream()));
    return {dx};
  }
};

}  // namespace

bool gelu_supported(const at::Tensor& x) {
  const auto t = x.scalar_type();
  return x.is_cuda() && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
}

at::Tensor gelu(const at::Tensor& x) { return GeluFn::apply(x); }

}  // namespace llmtrain::ops::cuda
