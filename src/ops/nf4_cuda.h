// ops/nf4.h's CUDA path: the kernels of kernels/nf4.cu.
#pragma once

#include "cuda_common.h"
#include "llmtrain/ops/nf4.h"

namespace llmtrain::ops::cuda {

/// nf4_dequantize on the GPU, for float32, bfloat16 and float16.
at::Tensor nf4_dequantize(const NF4Weight& q, at::ScalarType dtype);
/// x W^T + bias for x (..., K) of at most kNF4GemvMaxRows rows, or an undefined tensor when the kernel
/// does not take it (more rows, K not a multiple of 64, float32).
at::Tensor nf4_gemv(const at::Tensor& x, const NF4Weight& q, const at::Tensor& bias);

}  // namespace llmtrain::ops::cuda
