// Products of a few rows with a layer's weight, for generation: y (M, N) = act(in W^T + b) with M at
// most kGemvMaxRows, where `in` is x, or the layer norm of x + delta (x + delta written out too): the
// residual add and the norm before a layer folded into its product, which cuBLAS cannot take. A decode
// step at batch 1 is such products and little else; with the norms folded in a GPT-2 layer takes five
// launches instead of seven, and each reads its weight in 16-byte loads, several in flight a thread.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

constexpr int64_t kGemvMaxRows = 4;

/// One product. x, delta, sum, w and y contiguous and 16-byte aligned; every tensor of `dtype`.
struct GemvArgs {
  int64_t M = 0, N = 0, K = 0;
  DType dtype = DType::kBFloat16;
  const void* x = nullptr;          // (M, K)
  const void* delta = nullptr;      // (M, K) or null: the input is x + delta, rounded to dtype
  void* sum = nullptr;              // (M, K): x + delta as stored, written when delta is given
  const void* ln_weight = nullptr;  // (K) or null (no norm)
  const void* ln_bias = nullptr;    // (K), with ln_weight
  float eps = 1e-5f;
  const void* w = nullptr;     // (N, K), a linear layer's weight
  const void* bias = nullptr;  // (N) or null
  bool gelu = false;           // tanh GELU of the result
  void* y = nullptr;           // (M, N)
};

/// True when launch_gemv takes M rows of K elements of `dtype`: 1 <= M <= kGemvMaxRows, K a multiple of
/// 16 bytes, and the M normalised rows fit the block's 48 KiB of shared memory.
bool gemv_fits(DType dtype, int64_t M, int64_t K);

/// Queues the product on `stream`; cudaErrorInvalidValue for arguments gemv_fits or the alignment rule
/// refuse.
cudaError_t launch_gemv(const GemvArgs& args, cudaStream_t stream);

}  // namespace llmtrain::kernels
