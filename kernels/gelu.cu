// A grid-stride loop in which each thread takes kUnroll 16-byte packs at a time (when every pointer is
// 16-byte aligned; its loads issued together, so that enough bytes are in flight to keep HBM busy), then
// the elements past the last whole tile, one per thread. bf16 uses the tanh.approx instruction (relative
// error ~2^-11, under bf16's rounding), since tanhf's instructions are a large share of the time at
// 4.8 TB/s; float32 and fp16 (whose rounding is finer than that error) use tanhf.
#include <algorithm>
#include <type_traits>

#include "common/common.cuh"
#include "gelu.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 2;

template <int P>
__host__ __device__ constexpr int64_t tile_elements() {  // what a block takes at a time: kUnroll packs a thread
  return int64_t(kThreads) * kUnroll * P;
}

template <typename T>
__device__ __forceinline__ float gelu_grad(float x) {
  const float x2 = x * x, t = tanh_for<T>(kGeluBeta * (x + kGeluKappa * x2 * x));
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kGeluBeta * (1.f + 3.f * kGeluKappa * x2);
}

// Forward: a = x (b unused). Backward: a = dy, b = x.
template <typename T, int P, bool kBackward>
__global__ void __launch_bounds__(kThreads)
    gelu_kernel(const T* a, const T* __restrict__ b, int64_t n, T* out) {  // out may alias a (dy)
  const auto f = [](float va, float vb) { return kBackward ? va * gelu_grad<T>(vb) : gelu<T>(va); };
  const int64_t tiles = n / tile_elements<P>();
  for (int64_t g = blockIdx.x; g < tiles; g += gridDim.x) {
    // The tile's pack u * kThreads + threadIdx.x is this thread's u-th.
    const int64_t first = g * tile_elements<P>() + int64_t(threadIdx.x) * P;
    float va[kUnroll][P], vb[kUnroll][P];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      load_floats<P>(a + first + u * kThreads * P, va[u]);
      if constexpr (kBackward) load_floats<P>(b + first + u * kThreads * P, vb[u]);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float o[P];
#pragma unroll
      for (int k = 0; k < P; ++k) o[k] = f(va[u][k], kBackward ? vb[u][k] : 0.f);
      store_floats<P>(out + first + u * kThreads * P, o);
    }
  }
  // The elements past the last whole tile (fewer than one tile), one per thread.
  for (int64_t j = tiles * tile_elements<P>() + int64_t(blockIdx.x) * kThreads + threadIdx.x; j < n;
       j += int64_t(gridDim.x) * kThreads)
    out[j] = from_float<T>(f(to_float(a[j]), kBackward ? to_float(b[j]) : 0.f));
}

template <bool kBackward>
cudaError_t launch(const void* a, const void* b, DType dtype, int64_t n, void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto go = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    constexpr int P = 16 / int(sizeof(T));
    const bool packed = is_aligned(a, 16) && is_aligned(b, 16) && is_aligned(out, 16);
    const int64_t tiles = packed ? n / tile_elements<P>() : n / tile_elements<1>();
    const int64_t grid = std::clamp<int64_t>(tiles, 1, int64_t(1) << 16);
    if (packed)
      gelu_kernel<T, P, kBackward>
          <<<grid, kThreads, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b), n, static_cast<T*>(out));
    else
      gelu_kernel<T, 1, kBackward>
          <<<grid, kThreads, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b), n, static_cast<T*>(out));
  };
  with_element_type(dtype, go);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_gelu_fwd(const void* x, DType dtype, int64_t n, void* y, cudaStream_t stream) {
  return launch<false>(x, nullptr, dtype, n, y, stream);
}

cudaError_t launch_gelu_bwd(const void* dy, const void* x, DType dtype, int64_t n, void* dx, cudaStream_t stream) {
  return launch<true>(dy, x, dtype, n, dx, stream);
}

}  // namespace llmtrain::kernels
