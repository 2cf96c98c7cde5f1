// The activations' glue: the kernels behind autograd functions that keep their inputs for backward.
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

struct SwigluFn : torch::autograd::Function<SwigluFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& gate_in, const at::Tensor& up_in) {
    const at::Tensor gate = gate_in.contiguous(), up = up_in.contiguous();
    at::Tensor y = at::empty_like(gate);
    LLMTRAIN_CUDA_CHECK(kernels::launch_swiglu_fwd(gate.data_ptr(), up.data_ptr(), kernel_dtype(gate, "swiglu: gate"),
                                                   gate.numel(), y.data_ptr(), at::cuda::getCurrentCUDAStream()));
    ctx->save_for_backward({gate, up});
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &gate = saved[0], &up = saved[1];
    const at::Tensor dy = grads[0].to(gate.scalar_type()).contiguous();
    at::Tensor dgate = at::empty_like(gate), dup = at::empty_like(up);
    LLMTRAIN_CUDA_CHECK(kernels::launch_swiglu_bwd(dy.data_ptr(), gate.data_ptr(), up.data_ptr(),
                                                   kernel_dtype(gate, "swiglu: gate"), gate.numel(), dgate.data_ptr(),
                                                   dup.data_ptr(), at::cuda::getCurrentCUDAStream()));
    return {dgate, dup};
  }
};

}  // namespace

bool gelu_supported(const at::Tensor& x) {
  const auto t = x.scalar_type();
  return x.is_cuda() && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
}

at::Tensor gelu(const at::Tensor& x) { return GeluFn::apply(x); }

bool swiglu_supported(const at::Tensor& gate, const at::Tensor& up) {
  return gelu_supported(gate) && up.is_cuda() && up.scalar_type() == gate.scalar_type() && up.sizes() == gate.sizes();
}

at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up) { return SwigluFn::apply(gate, up); }

}  // namespace llmtrain::ops::cuda
