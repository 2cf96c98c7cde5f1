// ops::add_layer_norm's and ops::add_rms_norm's CUDA paths.
#pragma once

#include <utility>

#include "cuda_common.h"

namespace llmtrain::ops::cuda {

/// True when the layer norm kernels take these: CUDA tensors, x of float32/bf16/fp16 with a row width
/// kernels::layer_norm_fits, weight and bias contiguous of x's dtype or float32.
bool layer_norm_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
/// ops::add_layer_norm on the kernels (an autograd function); delta may be undefined (then only
/// layer_norm(x) is computed and returned, as .second). x and delta share one dtype.
std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                                 const at::Tensor& bias, double eps);

/// True when the kernels take RMSNorm of these: CUDA tensors, x of float32/bf16/fp16 with a row width
/// kernels::layer_norm_fits, weight contiguous of x's dtype.
bool rms_norm_supported(const at::Tensor& x, const at::Tensor& weight);
/// ops::add_rms_norm on the kernels (an autograd function); delta may be undefined, as above.
std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                               double eps);

}  // namespace llmtrain::ops::cuda
