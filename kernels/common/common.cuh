// What the kernels share: conversions to and from float (all math is float32), 16-byte vector loads,
// and warp/block reductions. Pure CUDA: no ATen, no torch. Included by .cu files only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>
#include <utility>

#include "dtype.h"

namespace llmtrain::kernels {

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }

template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}
template <>
__device__ __forceinline__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}

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

/// Launches `kernel` as a programmatic dependent launch: its blocks may start before the kernel ahead
/// of it on the stream has finished, once that one's blocks have all run let_dependents_start() (or
/// ended). Such a kernel must run wait_for_previous_kernel() before it reads what the kernels before
/// wrote or writes anything; what it does above that call (fetching constant weights) overlaps them.
template <typename... Params, typename... Args>
cudaError_t launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                             Args&&... args) {
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attr;
  config.numAttrs = 1;
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

/// Lets the next kernel on the stream, if launched by launch_dependent, start its blocks now.
__device__ __forceinline__ void let_dependents_start() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

/// Waits until the kernels before this one on the stream have finished and their writes are visible
/// (at once in a kernel not launched by launch_dependent).
__device__ __forceinline__ void wait_for_previous_kernel() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

/// tanh for T's GELU: bf16 takes the tanh.approx instruction (relative error ~2^-11, under bf16's
/// rounding); float32 and fp16, whose rounding is finer than that error, take tanhf.
template <typename T>
__device__ __forceinline__ float tanh_for(float x) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    float y;
    asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
  } else {
    return tanhf(x);
  }
}

constexpr float kGeluBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kGeluKappa = 0.044715f;

/// GELU, tanh approximation, for a result stored as T.
template <typename T>
__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.f + tanh_for<T>(kGeluBeta * (x + kGeluKappa * x * x * x)));
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
