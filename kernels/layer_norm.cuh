// Layer norm over the last dimension (C) of N rows, forward and backward. The backward pass writes dx
// and, per block, partial sums of dweight and dbias over that block's rows (each thread owns fixed
// columns and adds its rows in order), which a second launch sums over the blocks in order: the
// gradients are reproducible bit for bit, with no atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

/// The widest row the kernels take (each of 256 threads keeps C / 256 column sums in registers).
constexpr int64_t kLayerNormMaxC = 4096;

/// out = (x - mean) * rstd * weight + bias per row; mean and rstd (float32) kept for backward.
/// x and out have dtype `dtype`; weight and bias `wdtype` (the same, or float32).
cudaError_t launch_layer_norm_fwd(const void* x,  // (N, C) contiguous
                                  const void* weight, const void* bias,  // (C)
                                  DType dtype, DType wdtype, int64_t N, int64_t C, float eps,
                                  void* out,                  // (N, C)
                                  float* mean, float* rstd,   // (N)
                                  cudaStream_t stream);

/// The number of blocks launch_layer_norm_bwd uses for N rows: the rows of the partial-sum buffers.
int64_t layer_norm_bwd_blocks(int64_t N);

/// dx = rstd * (g - mean(g) - xhat * mean(g * xhat)) with g = dout * weight, xhat = (x - mean) * rstd;
/// partial_dw[b, c] and partial_db[b, c] = sums over block b's rows of dout * xhat and dout.
cudaError_t launch_layer_norm_bwd(const void* dout, const void* x,   // (N, C)
                                  const void* weight,                // (C)
                                  const float* mean, const float* rstd,  // (N)
                                  DType dtype, DType wdtype, int64_t N, int64_t C,
                                  void* dx,                          // (N, C)
                                  float* partial_dw, float* partial_db,  // (layer_norm_bwd_blocks(N), C)
                                  cudaStream_t stream);

/// dweight[c] and dbias[c] (wdtype) = the partial sums over `blocks` rows, in order.
cudaError_t launch_layer_norm_bwd_finish(const float* partial_dw, const float* partial_db, int64_t blocks, int64_t C,
                                         DType wdtype, void* dweight, void* dbias, cudaStream_t stream);

}  // namespace llmtrain::kernels
