// Causal flash attention for Hopper (sm_90a), the training shapes' attention: softmax(q k^T / sqrt(D)) v
// over a whole sequence, with the scores never leaving the chip. A block takes 128 queries of one head:
// one producer warp loads the query tile once and streams key/value tiles (TMA, a two-stage pipeline of
// transaction barriers) while two consumer warpgroups each multiply 64 of the queries with warpgroup
// matrix instructions (scores from shared memory, then P V with P kept in registers) and keep an online
// softmax. Key tiles past the diagonal are never loaded. Built with CuTe (CUTLASS's headers).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "../common/dtype.h"

namespace llmtrain::kernels {

/// One (B, heads, T, D) operand: its base pointer and strides in elements; D's stride is 1.
struct FlashTensor {
  const void* data = nullptr;
  int64_t batch_stride = 0, head_stride = 0, row_stride = 0;
};

struct FlashArgs {
  FlashTensor q, k, v;  // q: (B, H, T, D); k and v: (B, KV, T, D), KV dividing H (head h reads h / (H / KV))
  void* o = nullptr;    // (B, H, T, D) at the strides below
  int64_t o_batch_stride = 0, o_head_stride = 0, o_row_stride = 0;
  float* lse = nullptr;  // (B, H, T) float32: each row's log-sum-exp of the scaled scores (for backward)
  int64_t batch = 0, heads = 0, kv_heads = 0, seqlen = 0, head_dim = 0;
  float scale = 0.f;  // of the scores, usually 1 / sqrt(D)
  DType dtype = DType::kBFloat16;
};

/// True when launch_flash_forward takes these: bf16, head dim 64 or 128, pointers 16-byte aligned,
/// strides multiples of 8 elements (the TMA's 16 bytes), sizes within int32 and B and H within a grid
/// dimension (65535).
bool flash_fits(const FlashArgs& args);
/// One operand's part of that (q, k, v, or a backward pass's dout): its pointer 16-byte aligned, its
/// strides multiples of 8 elements.
bool flash_fits(const FlashTensor& t);

/// o and lse for causal attention (query t sees keys 0..t). Asynchronous on `stream`.
cudaError_t launch_flash_forward(const FlashArgs& args, cudaStream_t stream);

/// The fp8 forward's operands: q, k and v as e4m3 codes, each (b, head) under a scale of its own that
/// takes its largest magnitude to 448. v is stored transposed, (B, KV, D, flash_fp8_keys(T)), because
/// Hopper's fp8 products read both operands along their inner dimension (for P V, the keys); within each
/// 16 keys it is stored in the order in which P's registers hold them (slot 4t + u holds key
/// 2t + (u & 1) + 8 (u >> 1)), so that P goes from the scores' accumulators to the product's operand
/// without moving between lanes. Keys past T are zeros. Every buffer is contiguous.
struct FlashFp8 {
  void* q = nullptr;           // (B, H, T, D) e4m3
  void* k = nullptr;           // (B, KV, T, D) e4m3
  void* vt = nullptr;          // (B, KV, D, flash_fp8_keys(T)) e4m3
  float* q_descale = nullptr;  // (B, H): what a code is multiplied by to give back q
  float* k_descale = nullptr;  // (B, KV)
  float* v_descale = nullptr;  // (B, KV)
};

/// vt's key length: T rounded up to the kernel's 128 keys a tile.
int64_t flash_fp8_keys(int64_t seqlen);

/// Writes `codes` from the bf16 q, k and v of `args` (the scales from each (b, head)'s largest magnitude):
/// two passes over them. Asynchronous on `stream`.
cudaError_t launch_flash_fp8_quantize(const FlashArgs& args, const FlashFp8& codes, cudaStream_t stream);
/// launch_flash_forward with the two products in fp8 (e4m3 x e4m3, float32 sums): q K^T from the codes,
/// then P V with P, which lies in [0, 1], rounded to e4m3 after a multiplication by 256 that the softmax's
/// sum cancels. `args` gives the shapes, o, lse and the scale (its q, k and v are not read). About 4.5% of
/// o's norm from the exact attention on Gaussian inputs, against 0.3% for bf16.
cudaError_t launch_flash_fp8_forward(const FlashArgs& args, const FlashFp8& codes, cudaStream_t stream);

struct FlashBackwardArgs {
  FlashArgs forward;  // q, k, v, o and lse as the forward wrote them (o's strides multiples of 8 elements)
  FlashTensor dout;   // (B, H, T, D), D contiguous, as flash_fits asks of q
  // float32 scratch of flash_delta_floats(forward) floats: the call writes each row's rowsum(dout o) and
  // log-sum-exp there first, padded to whole tiles.
  float* delta = nullptr;
  // dq's float32 sums, scratch of flash_dq_accum_floats(forward, deterministic) floats in the kernel's own
  // order: one tile of 64 queries added to by every block of keys (in no fixed order), or, deterministic,
  // each block's share stored apart and summed in the order of the blocks.
  float* dq_accum = nullptr;
  bool deterministic = false;
  // dq (B, H, T, D) bf16 at these strides (multiples of 8 elements, D contiguous), written last.
  void* dq = nullptr;
  int64_t dq_batch_stride = 0, dq_head_stride = 0, dq_row_stride = 0;
  // dk and dv (B, H, T, D) per query head (a group's heads are the caller's to sum), float32 or, with
  // bf16_dkv, rounded to bf16.
  void* dk = nullptr;
  void* dv = nullptr;
  bool bf16_dkv = false;
};

/// The floats of FlashBackwardArgs::delta.
int64_t flash_delta_floats(const FlashArgs& args);
/// The floats of FlashBackwardArgs::dq_accum.
int64_t flash_dq_accum_floats(const FlashArgs& args, bool deterministic);

/// The gradients of launch_flash_forward's o with respect to q, k and v, given dout (see
/// FlashBackwardArgs): dk and dv are stored, bitwise reproducible; dq is reproducible only when
/// deterministic. Three kernels: rowsum(dout o) (and dq_accum zeroed), the gradients, dq's rounding.
cudaError_t launch_flash_backward(const FlashBackwardArgs& args, cudaStream_t stream);

}  // namespace llmtrain::kernels
