// The CUDA path of ops::fp8_linear and ops::fp8_update_scales: casts to fp8 codes (with their
// transposes and amaxes) in kernels/fp8.cu, products of the codes on cuBLASLt's fp8 tensor cores.
#pragma once

#include <vector>

#include "cuda_common.h"
#include "llmtrain/ops/fp8.h"

namespace llmtrain::ops::cuda {

/// True when the fp8 products take this layer: CUDA tensors on a GPU with fp8 tensor cores (compute
/// capability 8.9 or newer), x and the weight bf16 or fp16 (the bias too), the weight's sizes and x's
/// rows multiples of 16 (cuBLASLt's fp8 products want them), the scaling on x's device.
bool fp8_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const Fp8Scaling& s);
/// ops::fp8_linear on them (an autograd function); `record`: the amaxes of x and W go into the history;
/// with s.first_pass, backward sets the output gradient's scale where it is unset (ops::fp8_first_scale).
at::Tensor fp8_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, const Fp8Scaling& s,
                      bool record);
/// True when every layer's scaling is on one CUDA device, contiguous.
bool fp8_update_supported(const std::vector<Fp8Scaling>& layers);
/// ops::fp8_update_scales for all of them in one launch.
void fp8_update_scales(const std::vector<Fp8Scaling>& layers, int64_t margin);

}  // namespace llmtrain::ops::cuda
