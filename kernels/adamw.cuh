// The optimizer step over every parameter tensor in three launches: per-chunk sums of squares of the
// gradients, their total (the global norm, in a fixed order: reproducible) turned into one scale that
// folds in the loss-scale inverse and the clipping factor, and AdamW over all tensors, fp32 master
// weights, with the bf16 copies written back. The scale never leaves the device: a non-finite norm
// turns the AdamW launch into a no-op on the GPU, so the step needs no host synchronisation. Tensors
// are cut into chunks of kAdamWChunk elements; each block takes one chunk of one tensor.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

constexpr int64_t kAdamWChunk = 65536;

/// One parameter tensor: what AdamW reads and writes (all float32 unless said otherwise).
struct AdamWTensor {
  float* master;      // weights, updated in place
  void* param;        // null, or a bfloat16 copy of the weights written after the update
  const void* grad;   // the launch's grad dtype
  float* exp_avg;     // first moment
  float* exp_avg_sq;  // second moment
  int64_t numel;
  float weight_decay;  // decoupled: master *= 1 - lr * weight_decay
  uint64_t round_key;  // the stochastic rounding's key for this tensor's bf16 copy (rounding.h)
};

/// Chunk c of the launch: elements [start, min(start + kAdamWChunk, numel)) of tensors[tensor].
struct AdamWChunk {
  int64_t tensor;
  int64_t start;
};

/// partials[c] = sum of grad^2 over chunk c (float32 math).
cudaError_t launch_grad_sumsq(const AdamWTensor* tensors, const AdamWChunk* chunks,  // device arrays
                              int64_t num_chunks, DType grad_dtype, float* partials, cudaStream_t stream);

/// out[0] = sqrt(sum of partials) * inv_scale (the norm of the unscaled gradients); out[1] = the factor
/// AdamW multiplies gradients by: inv_scale * min(1, max_norm / (out[0] + 1e-6)) (no clipping when
/// max_norm <= 0), or NaN when the norm is not finite.
cudaError_t launch_grad_norm_finish(const float* partials, int64_t num_chunks, float inv_scale, float max_norm,
                                    float* out, cudaStream_t stream);

/// AdamW with bias corrections bc1 = 1 - beta1^step, bc2 = 1 - beta2^step, on g = grad * scale[0];
/// nothing is written when scale[0] is not finite. The bf16 copies are rounded stochastically (keyed by
/// each tensor's round_key and the element's index) when `stochastic`, to nearest otherwise.
cudaError_t launch_adamw(const AdamWTensor* tensors, const AdamWChunk* chunks, int64_t num_chunks, DType grad_dtype,
                         float lr, float beta1, float beta2, float eps, float bc1, float bc2, const float* scale,
                         bool stochastic, cudaStream_t stream);

}  // namespace llmtrain::kernels
