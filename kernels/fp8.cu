// The cast works on 64 x 64 tiles, 256 threads a block: a thread reads 8 consecutive elements of a row
// (one 16-byte pack of bf16 or fp16, two of float32) in each of two passes, writes their 8 codes as one
// 8-byte store, and, for the transpose, leaves them in a shared tile (rows padded to 68 bytes, so the
// column reads that follow meet few bank conflicts) from which each thread gathers 8 codes of a column
// and stores them as one row piece of the transpose. The block's amax takes one atomicMax on the float's
// bits, which order like the floats for non-negative values (and put NaN above infinity).
#include <cuda_fp8.h>

#include "common/common.cuh"
#include "fp8.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kTile = 64, kThreads = 256, kPad = 4;

// max that keeps a NaN, as ATen's amax does.
__device__ __forceinline__ float nan_max(float a, float b) { return (a > b || a != a) ? a : b; }

template <Fp8Format F>
__device__ __forceinline__ uint16_t two_codes(float a, float b) {
  constexpr __nv_fp8_interpretation_t kind = F == Fp8Format::kE4M3 ? __NV_E4M3 : __NV_E5M2;
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, kind);
}

template <typename T, Fp8Format F>
__global__ void __launch_bounds__(kThreads)
    fp8_cast_kernel(const T* __restrict__ x, int64_t rows, int64_t cols, const float* __restrict__ scale,
                    uint8_t* __restrict__ codes, uint8_t* __restrict__ codes_t, float* __restrict__ amax,
                    float* __restrict__ inv_scale) {
  __shared__ uint8_t tile[kTile][kTile + kPad];
  __shared__ float scratch[32];
  const int64_t row0 = int64_t(blockIdx.y) * kTile, col0 = int64_t(blockIdx.x) * kTile;
  const int piece = threadIdx.x % 8, r = threadIdx.x / 8;  // 8 threads a 64-element row, 32 rows a pass
  const float s = *scale != 0.f ? *scale : 1.f;            // 0: unset (ops::Fp8Scaling), cast as 1
  if (inv_scale != nullptr && blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *inv_scale = 1.f / s;
  float most = 0.f;
#pragma unroll
  for (int pass = 0; pass < 2; ++pass) {
    const int tr = r + pass * 32;
    const int64_t row = row0 + tr, col = col0 + piece * 8;
    uint2 packed = make_uint2(0, 0);
    if (row < rows && col < cols) {
      float v[8];
      load_floats<8>(x + row * cols + col, v);
      uint16_t c[4];
#pragma unroll
      for (int i = 0; i < 8; ++i) most = nan_max(most, fabsf(v[i]));
#pragma unroll
      for (int i = 0; i < 4; ++i) c[i] = two_codes<F>(v[2 * i] * s, v[2 * i + 1] * s);
      packed = make_uint2(uint32_t(c[0]) | uint32_t(c[1]) << 16, uint32_t(c[2]) | uint32_t(c[3]) << 16);
      if (codes != nullptr) *reinterpret_cast<uint2*>(codes + row * cols + col) = packed;
    }
    if (codes_t != nullptr) {
      const uint8_t* b = reinterpret_cast<const uint8_t*>(&packed);
#pragma unroll
      for (int i = 0; i < 8; ++i) tile[tr][piece * 8 + i] = b[i];
    }
  }
  if (codes_t != nullptr) {
    __syncthreads();
#pragma unroll
    for (int pass = 0; pass < 2; ++pass) {
      const int tc = r + pass * 32;  // the tile's column: a row of the transpose
      const int64_t out_row = col0 + tc, out_col = row0 + piece * 8;
      if (out_row < cols && out_col < rows) {
        uint8_t b[8];
#pragma unroll
        for (int i = 0; i < 8; ++i) b[i] = tile[piece * 8 + i][tc];
        *reinterpret_cast<uint2*>(codes_t + out_row * rows + out_col) = *reinterpret_cast<const uint2*>(b);
      }
    }
  }
  if (amax != nullptr) {
    for (int o = 16; o > 0; o >>= 1) most = nan_max(most, __shfl_xor_sync(0xffffffffu, most, o));
    if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = most;
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < kThreads / 32; ++w) most = nan_max(most, scratch[w]);
      atomicMax(reinterpret_cast<int*>(amax), __float_as_int(most));
    }
  }
}

__global__ void fp8_update_scales_kernel(float* const* histories, float* const* scales, int layers, int history,
                                         float margin_factor) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;  // a (layer, row) a thread
  if (i >= layers * 3) return;
  const int layer = i / 3, row = i % 3;
  float* h = histories[layer] + int64_t(row) * history;
  float amax = 0.f;
  for (int j = 0; j < history; ++j) amax = nan_max(amax, h[j]);
  const float largest = row == 2 ? 57344.f : 448.f;
  const float next = largest / amax / margin_factor;
  if (amax > 0.f && isfinite(next)) scales[layer][row] = next;
  for (int j = history - 1; j > 0; --j) h[j] = h[j - 1];
  h[0] = 0.f;
}

}  // namespace

bool fp8_cast_fits(const Fp8CastArgs& a) {
  return a.format != Fp8Format::kNone && a.rows >= 0 && a.cols >= 0 && a.rows % 8 == 0 && a.cols % 8 == 0 &&
         a.rows / kTile < 65535 && a.scale != nullptr && is_aligned(a.x, 16) && is_aligned(a.codes, 16) &&
         is_aligned(a.codes_t, 16);
}

cudaError_t launch_fp8_cast(const Fp8CastArgs& a, cudaStream_t stream) {
  if (!fp8_cast_fits(a)) return cudaErrorInvalidValue;
  if ((a.rows == 0 || a.cols == 0) && a.inv_scale == nullptr) return cudaSuccess;  // else one block writes it
  const dim3 grid(unsigned(std::max<int64_t>((a.cols + kTile - 1) / kTile, 1)),
                  unsigned(std::max<int64_t>((a.rows + kTile - 1) / kTile, 1)));
  with_element_type(a.dtype, [&](auto* type) {
    using T = std::remove_pointer_t<decltype(type)>;
    const T* x = static_cast<const T*>(a.x);
    if (a.format == Fp8Format::kE4M3)
      fp8_cast_kernel<T, Fp8Format::kE4M3>
          <<<grid, kThreads, 0, stream>>>(x, a.rows, a.cols, a.scale, a.codes, a.codes_t, a.amax, a.inv_scale);
    else
      fp8_cast_kernel<T, Fp8Format::kE5M2>
          <<<grid, kThreads, 0, stream>>>(x, a.rows, a.cols, a.scale, a.codes, a.codes_t, a.amax, a.inv_scale);
  });
  return cudaGetLastError();
}

cudaError_t launch_fp8_update_scales(float* const* histories, float* const* scales, int layers, int history, int margin,
                                     cudaStream_t stream) {
  if (layers <= 0) return cudaSuccess;
  if (history < 1 || margin < 0 || margin > 64) return cudaErrorInvalidValue;
  constexpr int kBlock = 128;
  fp8_update_scales_kernel<<<(layers * 3 + kBlock - 1) / kBlock, kBlock, 0, stream>>>(histories, scales, layers,
                                                                                      history, ldexpf(1.f, margin));
  return cudaGetLastError();
}

}  // namespace llmtrain::kernels
