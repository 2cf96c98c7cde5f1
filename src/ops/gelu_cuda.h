// ops::gelu's and ops::swiglu's CUDA paths.
#pragma once

#include "cuda_common.h"

namespace llmtrain::ops::cuda {

/// True when the GELU kernels take x: a CUDA tensor of float32, bf16 or fp16.
bool gelu_supported(const at::Tensor& x);
/// ops::gelu on the kernels (an autograd function).
at::Tensor gelu(const at::Tensor& x);

/// True when the SwiGLU kernels take gate and up: CUDA tensors of one shape and of float32, bf16 or fp16.
bool swiglu_supported(const at::Tensor& gate, const at::Tensor& up);
/// ops::swiglu on the kernels (an autograd function).
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace llmtrain::ops::cuda
