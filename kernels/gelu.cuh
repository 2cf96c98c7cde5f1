// The MLP activations, elementwise, forward and backward: GELU with the tanh approximation (GPT-2's)
// and SwiGLU, silu(gate) * up (the Llama family's). One pass over the tensors in 16-byte packs, float32
// math for every storage type, the inputs kept by the caller for backward (the activation is
// recomputed there, never stored).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

/// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) for n elements of `dtype`.
cudaError_t launch_gelu_fwd(const void* x,  // (n) contiguous
                            DType dtype, int64_t n,
                            void* y,  // (n)
                            cudaStream_t stream);

/// dx = dy * gelu'(x) for n elements of `dtype`.
cudaError_t launch_gelu_bwd(const void* dy, const void* x,  // (n) each, contiguous
                            DType dtype, int64_t n,
                            void* dx,  // (n); may be dy itself
                            cudaStream_t stream);

/// y = silu(gate) * up = gate / (1 + exp(-gate)) * up for n elements of `dtype`.
cudaError_t launch_swiglu_fwd(const void* gate, const void* up,  // (n) each, contiguous
                              DType dtype, int64_t n,
                              void* y,  // (n)
                              cudaStream_t stream);

/// dgate = dy * up * s * (1 + gate * (1 - s)) with s = sigmoid(gate), dup = dy * silu(gate).
cudaError_t launch_swiglu_bwd(const void* dy, const void* gate, const void* up,  // (n) each, contiguous
                              DType dtype, int64_t n, void* dgate, void* dup,    // (n) each; may be inputs themselves
                              cudaStream_t stream);

}  // namespace llmtrain::kernels
