// A linear layer, y = x W^T + b. On CUDA tensors with a bias (the "linear" kernel switch of
// ops/dispatch.h on) it runs on packed rows flattened to one matrix, with ATen's product and bias
// epilogue forward, ATen's product for dx, and the bias gradient folded into the weight gradient's
// cuBLASLt product (no column-sum pass over dy); weight gradients come out contiguous. Elsewhere it is
// at::linear. Without a gradient, at most four rows (a decode step) take the few-row kernel of
// kernels/gemv.cuh ("gemv" switch). Under CUDA autocast the operands are cast as ATen's autocast casts a linear's.
#pragma once

#include <ATen/core/Tensor.h>

#include <utility>

namespace llmtrain::ops {

/// x (..., in), weight (out, in), bias (out) or undefined -> (..., out).
///   auto qkv = llmtrain::ops::linear(x, c_attn->weight, c_attn->bias);
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

/// The linear layer after a pre-norm block's residual add and layer norm, for inference (no backward:
/// call it under torch::NoGradGuard): {h, act(layer_norm(h) W^T + b)} with h = x + delta (delta
/// undefined: h = x) and act the tanh GELU when `gelu`, else none; bias may be undefined. On CUDA with
/// at most four rows (a decode step) it is one kernel, which cuBLAS's products cannot fold the norm
/// into; elsewhere ops::add_layer_norm, then ops::linear (on CUDA the GELU in the product's epilogue).
///   auto [h, qkv] = llmtrain::ops::norm_linear(x, delta, ln_1->weight, ln_1->bias, 1e-5, c_attn->weight,
///                                              c_attn->bias, /*gelu=*/false);
std::pair<at::Tensor, at::Tensor> norm_linear(const at::Tensor& x,          // (..., in)
                                              const at::Tensor& delta,      // x's shape, or undefined
                                              const at::Tensor& ln_weight,  // (in)
                                              const at::Tensor& ln_bias,    // (in)
                                              double eps,
                                              const at::Tensor& weight,  // (out, in)
                                              const at::Tensor& bias,    // (out) or undefined
                                              bool gelu);

/// norm_linear as the Llama family's decode step needs it (no backward): {h, y} with h = x + delta
/// (delta undefined: h = x), n = rms_norm(h, norm_weight, eps) and y the products of n with up to three
/// weights side by side, [n W0^T + b0 | n W1^T + b1 | ...] (a layer's separate q, k and v projections
/// as one), or with `swiglu` (two weights of one shape, gate and up) y = silu(n W0^T + b0) * (n W1^T + b1).
/// biases is empty or holds one per weight, any undefined. On CUDA with at most four rows it is one
/// kernel; elsewhere ops::add_rms_norm, ops::linear and ops::swiglu.
///   auto [h, qkv] = llmtrain::ops::rms_norm_linear(x, delta, norm->weight, 1e-5, {q_w, k_w, v_w}, {}, false);
std::pair<at::Tensor, at::Tensor> rms_norm_linear(const at::Tensor& x,            // (..., in)
                                                  const at::Tensor& delta,        // x's shape, or undefined
                                                  const at::Tensor& norm_weight,  // (in)
                                                  double eps,
                                                  at::TensorList weights,  // (out_i, in) each
                                                  at::TensorList biases,   // (out_i) each, or empty
                                                  bool swiglu);

}  // namespace llmtrain::ops
