// ops::gelu's CUDA path.
#pragma once

#include "cuda_common.h"

namespace llmtrain::ops::cuda {

/// True when the GELU kernels take x: a CUDA tensor of float32, bf16 or fp16.
bool gelu_supported(const at::Tensor& x);
/// ops::gelu on the kernels (an autograd function).
at::Tensor gelu(const at::Tensor& x);

}  // namespace llmtrain::ops::cuda
