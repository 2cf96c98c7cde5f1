// The fused classifier: softmax cross-entropy over a vocabulary-wide row of logits without ever
// storing probabilities. The forward pass reads each row once (an online max and sum of exponentials)
// and keeps only its log-sum-exp; the backward pass reads the row again and writes
// (softmax - one_hot) * scale straight into the gradient. The ATen composite instead casts the logits
// to float32, writes log-probabilities and reads and writes them again in backward: about five times
// the memory traffic on GPT-2's 50304-wide rows.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

/// For each row n of `logits` (N rows of `cols` elements, row stride `ld` >= cols; columns [0, V) are
/// classes, V <= cols, the rest padding):
/// lse[n] = log sum_j exp(logits[n, j]); loss[n] = lse[n] - logits[n, targets[n]], 0 when
/// targets[n] == ignore_index, NaN when a target lies outside [0, V).
cudaError_t launch_cross_entropy_fwd(const void* logits,  // (N, cols), row stride ld, dtype
                                     DType dtype, int64_t N, int64_t V, int64_t cols, int64_t ld,
                                     const int64_t* targets,  // (N)
                                     int64_t ignore_index,
                                     float* loss,  // (N)
                                     float* lse,   // (N)
                                     cudaStream_t stream);

/// dlogits[n, j] = (exp(logits[n, j] - lse[n]) - [j == targets[n]]) * scale[0] for j < V, and 0 for
/// padding columns V <= j < cols and for rows whose target is ignored. `scale` is a device scalar (the
/// upstream gradient over the number of counted targets), so no host synchronisation is needed.
/// dlogits may be logits itself when ld == cols: the gradient then replaces the logits in place.
cudaError_t launch_cross_entropy_bwd(const void* logits,  // (N, cols), row stride ld, dtype
                                     DType dtype, int64_t N, int64_t V, int64_t cols, int64_t ld,
                                     const int64_t* targets,  // (N)
                                     int64_t ignore_index,
                                     const float* lse,    // (N)
                                     const float* scale,  // (1)
                                     void* dlogits,       // (N, cols), dtype, contiguous
                                     cudaStream_t stream);

}  // namespace llmtrain::kernels
