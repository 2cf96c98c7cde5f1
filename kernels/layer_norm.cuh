// Layer norm over the last dimension (C) of N rows, forward and backward, optionally fused with the
// residual add before it in a pre-norm transformer: h = x + delta, out = LN(h), in one pass over the
// rows. Without a bias the same kernels compute RMSNorm (the Llama family's): no mean subtracted, out =
// h * rstd * weight with rstd = 1 / sqrt(mean(h^2) + eps), no dbias. A warp owns a row: it reads the row once in
// 16-byte packs and keeps it in registers between the statistics and the output. Backward writes dx (plus the gradient
// already flowing into h, when given, which saves autograd's separate add) and per-block partial sums of dweight and
// dbias in a fixed row order; a second launch adds the partials over the blocks in a fixed order, so the gradients are
// reproducible bit for bit, with no atomics.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

/// Whether the kernels take rows of C elements of `dtype`: C up to 1024, or up to 2048 for 16-bit types
/// with C a multiple of 8 (rows then go in 16-byte packs). All pointers must be 16-byte aligned.
bool layer_norm_fits(DType dtype, int64_t C);

/// h = x + delta (rounded to dtype, written to `h` when delta is given), out = (h - mean) * rstd *
/// weight + bias per row; mean and rstd (float32) kept for backward. x, delta, h and out have dtype
/// `dtype`; weight and bias `wdtype` (the same, or float32). Without delta, h is not written (may be null).
/// Without bias (null): RMSNorm, mean written as 0.
cudaError_t launch_layer_norm_fwd(const void* x,                         // (N, C) contiguous
                                  const void* delta,                     // (N, C) or null
                                  const void* weight, const void* bias,  // (C)
                                  DType dtype, DType wdtype, int64_t N, int64_t C, float eps,
                                  void* h,                   // (N, C), or null without delta
                                  void* out,                 // (N, C)
                                  float* mean, float* rstd,  // (N)
                                  cudaStream_t stream);

/// The number of blocks launch_layer_norm_bwd uses for N rows: the rows of the partial-sum buffers.
int64_t layer_norm_bwd_blocks(int64_t N);

/// dh = dh_in + rstd * (g - mean(g) - hhat * mean(g * hhat)) with g = dout * weight, hhat = (h - mean) *
/// rstd (dh_in may be null: zero); partial_dw[b, c] and partial_db[b, c] = sums over block b's rows of
/// dout * hhat and dout. With partial_db null: RMSNorm's backward (no mean(g) term, no dbias).
cudaError_t launch_layer_norm_bwd(const void* dout, const void* h,       // (N, C): the normalised rows' input
                                  const void* dh_in,                     // (N, C) or null
                                  const void* weight,                    // (C)
                                  const float* mean, const float* rstd,  // (N)
                                  DType dtype, DType wdtype, int64_t N, int64_t C,
                                  void* dh,                              // (N, C)
                                  float* partial_dw, float* partial_db,  // (layer_norm_bwd_blocks(N), C)
                                  cudaStream_t stream);

/// dweight[c] and dbias[c] (wdtype) = the partial sums over `blocks` rows, in a fixed order; partial_db
/// and dbias null for RMSNorm.
cudaError_t launch_layer_norm_bwd_finish(const float* partial_dw, const float* partial_db, int64_t blocks, int64_t C,
                                         DType wdtype, void* dweight, void* dbias, cudaStream_t stream);

}  // namespace llmtrain::kernels
