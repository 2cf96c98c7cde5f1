// One decoding step of causal attention against a KV cache: every row of the batch brings one new
// token, at a position of its own. A block per (head, row) appends the token's key and value to the
// row's cache and attends over the row's cached positions in one pass (an online softmax, never
// storing the scores), reading keys and values in 16-byte packs. Used where ATen would take four
// launches (two cache writes, a mask, a masked attention) and read the whole cache whatever the
// row's length.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

/// True when launch_decode_attention takes heads of D elements of `dtype`: D a power-of-two number of
/// 16-byte packs, 4 to 32 (bf16 and fp16: D = 32, 64, 128, 256; float32: D = 16, 32, 64, 128).
bool decode_attention_fits(DType dtype, int64_t D);

/// For each row b and query head h: writes the new key and value into the caches at position pos[b],
/// then out[b, h] = softmax(q k[lo..pos[b]]^T / sqrt(D)) v[lo..pos[b]], lo = pos[b] - window + 1 when
/// window > 0 (a sliding window), else 0. q, the new k and v are the row's fused projection
/// [q | k | v]: H query heads of D, then KV key and value heads each (grouped-query attention: KV
/// divides H, and query head h reads key/value head h / (H / KV)). With inv_freq (D / 2 floats) the
/// query and the new key are first rotated as launch_rotary rotates them, by the angles
/// pos[b] * inv_freq[i] (sincosf of the float32 product), and the key is cached rotated, rounded to
/// `dtype`; the query is rounded too, as a separate rotation would store it. A row whose pos lies outside
/// [0, S) writes nothing to the caches and gets NaN. Pointers and qkv's row stride must be 16-byte
/// aligned. Launched as a programmatic dependent launch (common.cuh) that reads pos and the cached
/// positions before pos[b] before the kernels ahead of it have finished: those must be written by an
/// ordinary launch (or an earlier step's attention) before the chain that leads to this one.
cudaError_t launch_decode_attention(const void* qkv, int64_t qkv_stride,  // (B, (H + 2 KV) D), rows qkv_stride apart
                                    void* k_cache, void* v_cache,         // (B, KV, S, D) contiguous each
                                    const int64_t* pos,                   // (B)
                                    DType dtype, int64_t B, int64_t H, int64_t KV, int64_t S, int64_t D, int64_t window,
                                    const float* inv_freq,  // (D / 2) or null: no rotation
                                    void* out,              // (B, H D)
                                    cudaStream_t stream);

}  // namespace llmtrain::kernels
