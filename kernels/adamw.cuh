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

/// One parameter tensor whose moments are in 8 bits (ops/adamw.h's layout): blocks of kAdamW8bitBlock
/// values, each a float32 absmax and a uint8 code per value, the first moment's codes indexing the signed
/// dynamic map, the second's the unsigned one. The moments may be in mapped pinned host memory.
constexpr int kAdamW8bitBlock = 256;
struct AdamW8bitTensor {
  float* master;
  void* param;
  const void* grad;
  uint8_t* m_codes;
  float* m_absmax;
  uint8_t* v_codes;
  float* v_absmax;
  int64_t numel;
  float decay;  // 1 - lr * weight_decay
  uint64_t round_key;
};

/// The step's constants, each rounded to float32 once from its double (as the ATen reference's scalars).
struct AdamW8bitStep {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, eps;
  float step_size;  // lr / (1 - beta1^step)
  float root_bc2;   // sqrt(1 - beta2^step)
};

/// The maps and the midpoints between their neighbours (a value's code: the number of midpoints below
/// it), on the device: float32, 256 and 255 values.
struct AdamW8bitMaps {
  const float* m_map;
  const float* m_mids;
  const float* v_map;
  const float* v_mids;
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

/// launch_adamw for tensors with 8-bit moments (chunks of kAdamWChunk elements, a multiple of the
/// block): each block's moments dequantized, updated as bitsandbytes' 8-bit AdamW updates them (m =
/// beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2, w -= lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)
/// after w *= 1 - lr wd) and quantized again to the nearest map entry against the block's new absmax.
cudaError_t launch_adamw8bit(const AdamW8bitTensor* tensors, const AdamWChunk* chunks, int64_t num_chunks,
                             DType grad_dtype, const AdamW8bitMaps& maps, const AdamW8bitStep& step, const float* scale,
                             bool stochastic, cudaStream_t stream);

}  // namespace llmtrain::kernels
