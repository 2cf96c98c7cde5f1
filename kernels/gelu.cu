// GELU and SwiGLU through one elementwise kernel: a grid-stride loop in which each thread takes kUnroll
// 16-byte packs of each input at a time (when every pointer is 16-byte aligned; its loads issued
// together, so that enough bytes are in flight to keep HBM busy), then the elements past the last whole
// tile, one per thread. bf16 uses the tanh.approx instruction (relative
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

// Up to three inputs and two outputs, all of n elements; Op::apply maps a position's input values to its
// output values. The outputs may alias inputs (each element is read before it is written).
template <typename T, int kIn, int kOut>
struct Args {
  const T* in[kIn];
  T* out[kOut];
};

template <typename T, int P, typename Op, int kIn, int kOut>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(Args<T, kIn, kOut> a, int64_t n) {
  const int64_t tiles = n / tile_elements<P>();
  for (int64_t g = blockIdx.x; g < tiles; g += gridDim.x) {
    // The tile's pack u * kThreads + threadIdx.x is this thread's u-th.
    const int64_t first = g * tile_elements<P>() + int64_t(threadIdx.x) * P;
    float v[kUnroll][kIn][P];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
#pragma unroll
      for (int i = 0; i < kIn; ++i) load_floats<P>(a.in[i] + first + u * kThreads * P, v[u][i]);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      float o[kOut][P];
#pragma unroll
      for (int k = 0; k < P; ++k) {
        float x[kIn], y[kOut];
#pragma unroll
        for (int i = 0; i < kIn; ++i) x[i] = v[u][i][k];
        Op::apply(x, y);
#pragma unroll
        for (int j = 0; j < kOut; ++j) o[j][k] = y[j];
      }
#pragma unroll
      for (int j = 0; j < kOut; ++j) store_floats<P>(a.out[j] + first + u * kThreads * P, o[j]);
    }
  }
  // The elements past the last whole tile (fewer than one tile), one per thread.
  for (int64_t e = tiles * tile_elements<P>() + int64_t(blockIdx.x) * kThreads + threadIdx.x; e < n;
       e += int64_t(gridDim.x) * kThreads) {
    float x[kIn], y[kOut];
#pragma unroll
    for (int i = 0; i < kIn; ++i) x[i] = to_float(a.in[i][e]);
    Op::apply(x, y);
#pragma unroll
    for (int j = 0; j < kOut; ++j) a.out[j][e] = from_float<T>(y[j]);
  }
}

template <typename T>
struct GeluFwd {  // x -> gelu(x)
  static __device__ __forceinline__ void apply(const float* x, float* y) { y[0] = gelu<T>(x[0]); }
};
template <typename T>
struct GeluBwd {  // dy, x -> dx
  static __device__ __forceinline__ void apply(const float* x, float* y) { y[0] = x[0] * gelu_grad<T>(x[1]); }
};
struct SwigluFwd {  // gate, up -> silu(gate) * up
  static __device__ __forceinline__ void apply(const float* x, float* y) { y[0] = x[0] / (1.f + __expf(-x[0])) * x[1]; }
};
struct SwigluBwd {  // dy, gate, up -> dgate, dup
  static __device__ __forceinline__ void apply(const float* x, float* y) {
    const float s = 1.f / (1.f + __expf(-x[1]));
    y[0] = x[0] * x[2] * s * (1.f + x[1] * (1.f - s));
    y[1] = x[0] * x[1] * s;
  }
};

// Launches Op over n elements of `dtype`: in 16-byte packs when every pointer is 16-byte aligned.
template <template <typename> class OpOf, int kIn, int kOut>
cudaError_t launch(std::initializer_list<const void*> in, std::initializer_list<void*> out, DType dtype, int64_t n,
                   cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto go = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    constexpr int P = 16 / int(sizeof(T));
    Args<T, kIn, kOut> a{};
    bool packed = true;
    int i = 0;
    for (const void* p : in) packed &= is_aligned(a.in[i++] = static_cast<const T*>(p), 16);
    i = 0;
    for (void* p : out) packed &= is_aligned(a.out[i++] = static_cast<T*>(p), 16);
    const int64_t tiles = packed ? n / tile_elements<P>() : n / tile_elements<1>();
    const int64_t grid = std::clamp<int64_t>(tiles, 1, int64_t(1) << 16);
    if (packed) elementwise_kernel<T, P, OpOf<T>, kIn, kOut><<<grid, kThreads, 0, stream>>>(a, n);
    else elementwise_kernel<T, 1, OpOf<T>, kIn, kOut><<<grid, kThreads, 0, stream>>>(a, n);
  };
  with_element_type(dtype, go);
  return cudaGetLastError();
}

template <typename>
using SwigluFwdOf = SwigluFwd;
template <typename>
using SwigluBwdOf = SwigluBwd;

}  // namespace

cudaError_t launch_gelu_fwd(const void* x, DType dtype, int64_t n, void* y, cudaStream_t stream) {
  return launch<GeluFwd, 1, 1>({x}, {y}, dtype, n, stream);
}

cudaError_t launch_gelu_bwd(const void* dy, const void* x, DType dtype, int64_t n, void* dx, cudaStream_t stream) {
  return launch<GeluBwd, 2, 1>({dy, x}, {dx}, dtype, n, stream);
}

cudaError_t launch_swiglu_fwd(const void* gate, const void* up, DType dtype, int64_t n, void* y, cudaStream_t stream) {
  return launch<SwigluFwdOf, 2, 1>({gate, up}, {y}, dtype, n, stream);
}

cudaError_t launch_swiglu_bwd(const void* dy, const void* gate, const void* up, DType dtype, int64_t n, void* dgate,
                              void* dup, cudaStream_t stream) {
  return launch<SwigluBwdOf, 3, 2>({dy, gate, up}, {dgate, dup}, dtype, n, stream);
}

}  // namespace llmtrain::kernels
