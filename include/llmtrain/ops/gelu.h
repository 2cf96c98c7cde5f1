// The MLP activations: GELU with the tanh approximation, as GPT-2 was trained with ("gelu_new" in
// Hugging Face), and SwiGLU's silu(gate) * up, the Llama family's.
#pragma once

#include <ATen/core/Tensor.h>

namespace llmtrain::ops {

/// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise, in x's dtype. On CUDA (float32,
/// bf16, fp16) the kernels of kernels/gelu.cu, forward and backward; elsewhere ATen's gelu.
///   auto h = llmtrain::ops::gelu(c_fc(x));
at::Tensor gelu(const at::Tensor& x);  // any shape

/// silu(gate) * up, elementwise, in their dtype. On CUDA (float32, bf16, fp16; one shape and dtype)
/// the kernels of kernels/gelu.cu, forward and backward, with one rounding; elsewhere ATen's silu and
/// product, as transformers computes them.
///   auto h = llmtrain::ops::swiglu(gate_proj(x), up_proj(x));
at::Tensor swiglu(const at::Tensor& gate, const at::Tensor& up);

}  // namespace llmtrain::ops
