// NF4 weights on the GPU (ops/nf4.h has the format: bitsandbytes' quantize_4bit with blocks of 64 and
// double quantization): dequantizing a whole weight, for the products cuBLAS runs when a QLoRA layer
// trains (the weight is dequantized for the forward and again for the input's gradient, then freed), and
// the product of a few rows with the weight read in its 4 bits, for sampling during a QLoRA run, where a
// step reads each weight once and reading a quarter of the bytes is the speed.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

constexpr int64_t kNF4GemvMaxRows = 8;

/// A quantized weight on the device.
struct NF4Args {
  const uint8_t* packed = nullptr;        // (ceil(numel / 2)): two codes a byte, the first in the high nibble
  const uint8_t* absmax_codes = nullptr;  // (ceil(numel / 64)): indices into the dynamic map
  const float* absmax2 = nullptr;         // (ceil(numel / 64 / 256)): the absmaxes' own scales
  float offset = 0;                       // added to every dequantized absmax
  const float* levels = nullptr;          // NF4's 16 levels
  const float* dynamic = nullptr;         // the signed dynamic map's 256 values
  int64_t numel = 0;
};

/// out (numel, of `dtype`) = levels[code] * (dynamic[absmax_code] * absmax2 + offset), each product in
/// float32 and rounded once to the dtype: what the ATen reference computes, bit for bit.
cudaError_t launch_nf4_dequantize(const NF4Args& w, DType dtype, void* out, cudaStream_t stream);

/// y (M, N) = x (M, K) W^T + bias for W (N, K) in NF4, x, bias (N, or null) and y bf16 or fp16, on the
/// tensor cores: each 64-value block's products of x with the levels rounded to the dtype, summed in
/// float32, then scaled by the block's absmax (the reference rounds each level * absmax instead: the
/// two differ by about the dtype's rounding of a weight). Needs 1 <= M <= kNF4GemvMaxRows, K a multiple
/// of 64 and x 16-byte aligned (nf4_gemv_fits); cudaErrorInvalidValue otherwise. Launched as a
/// programmatic dependent launch (common.cuh): the weight's bytes are in flight before the kernel ahead
/// of it on the stream has finished.
bool nf4_gemv_fits(int64_t M, int64_t K, DType dtype);
cudaError_t launch_nf4_gemv(const NF4Args& w, int64_t M, int64_t N, int64_t K, DType dtype, const void* x,
                            const void* bias, void* y, cudaStream_t stream);

}  // namespace llmtrain::kernels
