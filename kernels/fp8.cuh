// fp8 operands for ops::fp8_linear's products (kernels/matmul.cuh takes them): one pass over a tensor
// writes its fp8 codes under a scale, their transpose too (Hopper's fp8 products read both operands
// along k, so the gradient products need x^T, W^T and dy^T), the tensor's largest magnitude into an amax
// slot and the scale's inverse for the product; and one launch moves every layer's delayed scaling on
// after an optimizer step.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

/// x (rows, cols), row-major in `dtype`, as fp8 codes of x * *scale rounded to nearest even and
/// saturated at the format's largest finite value (NaN stays NaN). rows and cols multiples of 8; x and
/// the outputs 16-byte aligned.
struct Fp8CastArgs {
  const void* x = nullptr;
  DType dtype = DType::kBFloat16;
  int64_t rows = 0, cols = 0;
  Fp8Format format = Fp8Format::kE4M3;
  const float* scale = nullptr;  // device scalar; 0 (unset) casts as 1
  uint8_t* codes = nullptr;      // (rows, cols), or null
  uint8_t* codes_t = nullptr;    // (cols, rows): the codes transposed, or null
  float* amax = nullptr;         // device scalar raised to max |x| (NaN if any is), or null: not recorded
  float* inv_scale = nullptr;    // device scalar set to 1 / *scale, or null
};

/// True when the cast takes these sizes and pointers.
bool fp8_cast_fits(const Fp8CastArgs& args);

/// Queues the cast on `stream`; cudaErrorInvalidValue when fp8_cast_fits is false.
cudaError_t launch_fp8_cast(const Fp8CastArgs& args, cudaStream_t stream);

/// For each of `layers` layers, histories[i] a float32 (3, history) amax history (rows: input, weight,
/// output gradient; column 0 the step just taken) and scales[i] its 3 scales, both in device memory:
/// each scale becomes its format's largest value (448 for rows 0 and 1, 57344 for row 2) over its
/// row's largest amax, divided by 2^margin, unless that amax is 0 or the result is not finite (NaN
/// amaxes included); then each row moves on one column and column 0 starts again from 0. The pointer
/// arrays are in device memory.
cudaError_t launch_fp8_update_scales(float* const* histories, float* const* scales, int layers, int history, int margin,
                                     cudaStream_t stream);

}  // namespace llmtrain::kernels
