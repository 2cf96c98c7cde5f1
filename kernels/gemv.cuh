// Products of a few rows with a layer's weight, for generation: y (M, N) = act(in W^T + b) with M at
// most kGemvMaxRows, where `in` is x, or the layer norm or RMSNorm of x + delta (x + delta written out
// too): the residual add and the norm before a layer folded into its product, which cuBLAS cannot take.
// The weight may be up to three tensors read as one, their products side by side in y (a Llama layer's
// separate q, k and v projections in one launch), or a gate and an up projection whose products meet in
// SwiGLU's silu(gate) * up. A decode step at batch 1 is such products and little else; with the norms
// folded in a GPT-2 or Llama layer takes five launches, and each reads its weights in 16-byte loads,
// several in flight a thread.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

constexpr int64_t kGemvMaxRows = 4;
constexpr int kGemvMaxParts = 3;

enum class GemvAct {
  kNone,
  kGelu,    // tanh GELU of the result
  kSwiGLU,  // two parts of equal rows, gate and up: y (M, n[0]) = silu(in W0^T + b0) * (in W1^T + b1)
};

/// One product. x, delta, sum, the weights and y contiguous and 16-byte aligned; every tensor of
/// `dtype`.
struct GemvArgs {
  int64_t M = 0, K = 0;
  DType dtype = DType::kBFloat16;
  const void* x = nullptr;          // (M, K)
  const void* delta = nullptr;      // (M, K) or null: the input is x + delta, rounded to dtype
  void* sum = nullptr;              // (M, K): x + delta as stored, written when delta is given
  const void* ln_weight = nullptr;  // (K) or null (no norm)
  const void* ln_bias = nullptr;    // (K): a layer norm; null with ln_weight: RMSNorm (no mean, no bias)
  float eps = 1e-5f;
  int parts = 1;                         // weights, read as one (N, K) weight with N the sum of n
  const void* w[kGemvMaxParts] = {};     // (n[i], K) each, linear layers' weights
  const void* bias[kGemvMaxParts] = {};  // (n[i]) each, or null
  int64_t n[kGemvMaxParts] = {};
  GemvAct act = GemvAct::kNone;
  void* y = nullptr;  // (M, N); kSwiGLU: (M, n[0])
};

/// True when launch_gemv takes M rows of K elements of `dtype`: 1 <= M <= kGemvMaxRows, K a multiple of
/// 16 bytes, and the M normalised rows fit the block's 48 KiB of shared memory.
bool gemv_fits(DType dtype, int64_t M, int64_t K);

/// Queues the product on `stream`; cudaErrorInvalidValue for arguments gemv_fits or the alignment rule
/// refuse.
cudaError_t launch_gemv(const GemvArgs& args, cudaStream_t stream);

}  // namespace llmtrain::kernels
