// The rotary position embedding (RoPE) of the Llama family, forward and backward, in one pass over a
// projection laid out (tokens, heads, D) as the linear layer writes it: channel i < D / 2 of every
// head is paired with channel i + D / 2 and the pair rotated by the token's angle for i. ATen takes six
// passes for it (two products, a negation, a concatenation, a sum) and as many again backward.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

/// True when launch_rotary takes heads of D elements of `dtype`: D even and D / 2 a whole number of
/// 16-byte packs (bf16 and fp16: D a multiple of 16; float32: of 8).
bool rotary_fits(DType dtype, int64_t D);

/// For token r = b T + t and head h: (y1, y2) = (x1 c - x2 s, x2 c + x1 s), x1 and x2 the head's first
/// and second halves and c, s = cos, sin[b', t, :] (b' = b, or 0 when the tables have one row, shared
/// by the batch). With `inverse` the rotation goes the other way, s -> -s: the backward, since a
/// rotation's gradient is its transpose. The tables are float32 and the math float32; y is rounded
/// once. x and y contiguous and 16-byte aligned; y may be x.
cudaError_t launch_rotary(const void* x,                       // (B, T, heads, D)
                          const float* cos, const float* sin,  // (B or 1, T, D / 2) each, contiguous
                          bool tables_per_row, bool inverse, DType dtype, int64_t B, int64_t T, int64_t heads,
                          int64_t D,
                          void* y,  // (B, T, heads, D)
                          cudaStream_t stream);

}  // namespace llmtrain::kernels
