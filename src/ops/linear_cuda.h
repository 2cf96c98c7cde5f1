// The CUDA paths of ops::linear, ops::norm_linear and ops::mlp: cuBLASLt products with fused
// epilogues, and the few-row kernel.
#pragma once

#include "cuda_common.h"
#include "kernels/gemv.cuh"

namespace llmtrain::ops::cuda {

/// y (..., out) = x W^T + b for packed x (..., in), W (out, in), b (out), with `epilogue` kBias or
/// kGeluAuxBias (then y = gelu of it, the pre-activation into aux); false when cuBLASLt has no algorithm.
bool forward_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, kernels::Epilogue epilogue,
                     at::Tensor& y, const at::Tensor& aux = {});
/// dw (out, in) = dy^T x for packed x (N, in) and dy (N, out); with db, dy's column sums too (out), in
/// the product's epilogue where cuBLASLt has one for the shape.
void linear_weight_grads(const at::Tensor& x, const at::Tensor& dy, at::Tensor& dw, at::Tensor* db);

/// y = gelu(x W^T + b) without a gradient, the GELU in cuBLASLt's epilogue (its pre-activation in a
/// scratch tensor); false when cuBLASLt has no algorithm.
bool linear_gelu_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::Tensor& y);

/// y (..., N) = act(in W^T + b) on the few-row kernel (kernels/gemv.cuh), in = x or, given ln_weight,
/// layer_norm(x + delta) with ln_bias or rms_norm(x + delta) without (delta may be undefined); the
/// weights read as one, their products side by side (kSwiGLU: gate and up, y = silu(gate) * up);
/// biases empty or one per weight, any undefined; sum = x + delta (x itself without delta). False,
/// launching nothing, when the kernel does not take them: more than kernels::kGemvMaxRows rows, a row
/// width it cannot fit, tensors not all CUDA of one dtype.
bool gemv(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& ln_weight, const at::Tensor& ln_bias,
          double eps, at::TensorList weights, at::TensorList biases, kernels::GemvAct act, at::Tensor& sum,
          at::Tensor& y);

/// True when the cuBLASLt products take this layer: CUDA tensors of one dtype (float32, bf16, fp16),
/// the weight's both sizes multiples of 8. Both ops::linear's and ops::mlp's layers.
bool linear_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
/// ops::linear with a bias (an autograd function).
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
/// ops::mlp on cuBLASLt with fused epilogues (an autograd function).
at::Tensor mlp(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
               const at::Tensor& proj_weight, const at::Tensor& proj_bias);

}  // namespace llmtrain::ops::cuda
