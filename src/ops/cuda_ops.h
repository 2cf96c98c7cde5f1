// The CUDA paths of the ops (src/ops/*_cuda.cpp, built with LLMTRAIN_CUDA): where ATen tensors meet
// the launchers of kernels/. Each op's public function calls its CUDA path for CUDA tensors the path
// supports and its ATen reference otherwise.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "../../kernels/common/dtype.h"
#include "llmtrain/ops/adamw.h"

namespace llmtrain::ops::cuda {

/// The kernels' name for t's dtype; throws llmtrain::Error naming `what` for dtypes without a kernel.
kernels::DType kernel_dtype(const at::Tensor& t, const char* what);

/// True when the fused classifier takes these logits: a CUDA tensor of float32, bfloat16 or float16
/// with unit column stride.
bool cross_entropy_supported(const at::Tensor& logits);
/// ops::cross_entropy on the fused classifier (an autograd function).
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                         int64_t num_classes);

/// True when the layer norm kernels take these: CUDA tensors, x of float32/bf16/fp16 with at most
/// kernels::kLayerNormMaxC columns, weight and bias contiguous of x's dtype or float32.
bool layer_norm_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
/// ops::layer_norm on the kernels (an autograd function); x is made contiguous first.
at::Tensor layer_norm(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, double eps);

/// ops::grad_norm_scale and ops::adamw_step on the multi-tensor kernels (arguments already checked for
/// counts, shapes and devices; contiguity and dtypes are checked here).
at::Tensor grad_norm_scale(const std::vector<at::Tensor>& grads, double inv_scale, double max_norm);
void adamw_step(const std::vector<at::Tensor>& masters, const std::vector<at::Tensor>& grads,
                const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                const std::vector<at::Tensor>& params, const std::vector<double>& weight_decays,
                const AdamWHyper& hyper, const at::Tensor& norm_scale);

}  // namespace llmtrain::ops::cuda
