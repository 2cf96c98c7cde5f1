// What the kernels share: conversions to and from float (all math is float32), 16-byte vector loads,
// and warp/block reductions. Pure CUDA: no ATen, no torch. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "dtype.h"

namespace llmtrain::kernels {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) { return x; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <>
__device__ __forceinline__ __half from_float<__half>(float x) { return __float2half_rn(x); }

/// 16 bytes of T: the widest load one thread issues.
template <typename T>
struct alignas(16) Vec {
  static constexpr int kSize = 16 / sizeof(T);
  T v[kSize];
};

/// P consecutive elements of T, read and written as one access of P * sizeof(T) bytes (at most 16
/// bytes per instruction: a 32-byte pack of floats is two). P = 1 is the unvectorised case.
template <typename T, int P>
struct alignas(P * sizeof(T) >= 16 ? 16 : P * sizeof(T)) Pack {
  T v[P];
};

template <int P, typename T>
__device__ __forceinline__ void load_floats(const T* __restrict__ p, float (&out)[P]) {
  const Pack<T, P> pk = *reinterpret_cast<const Pack<T, P>*>(p);
#pragma unroll
  for (int i = 0; i < P; ++i) out[i] = to_float(pk.v[i]);
}

template <int P, typename T>
__device__ __forceinline__ void store_floats(T* __restrict__ p, const float (&in)[P]) {
  Pack<T, P> pk;
#pragma unroll
  for (int i = 0; i < P; ++i) pk.v[i] = from_float<T>(in[i]);
  *reinterpret_cast<Pack<T, P>*>(p) = pk;
}

/// True when `p` is aligned to `bytes` (a null pointer counts as aligned: an absent operand).
__host__ __device__ inline bool is_aligned(const void* p, int bytes) {
  return reinterpret_cast<uintptr_t>(p) % uintptr_t(bytes) == 0;
}

/// True when `p` and every row start (row stride `ld` elements) are 16-byte aligned.
template <typename T>
__host__ __device__ inline bool rows_aligned(const void* p, int64_t ld) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0 && (ld * int64_t(sizeof(T))) % 16 == 0;
}

/// Calls f with a null pointer of the element type `dtype` names (the type selects the kernel).
template <typename F>
inline void with_element_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::kFloat32: f(static_cast<float*>(nullptr)); break;
    case DType::kBFloat16: f(static_cast<__nv_bfloat16*>(nullptr)); break;
    case DType::kFloat16: f(static_cast<__half*>(nullptr)); break;
  }
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// The sum of `v` over the block, returned to every thread; `scratch` holds 32 floats. Blocks are
/// whole warps. The order of the additions depends only on the block size: results are reproducible.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read from a previous call
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : 0.f;
  return warp_sum(v);
}

/// The maximum of `v` over the block, returned to every thread; `scratch` holds 32 floats.
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(v);
}

}  // namespace llmtrain::kernels
