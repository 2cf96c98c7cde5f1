// A grid-stride loop over 16-byte packs (when every pointer is 16-byte aligned), then the few elements
// past the last whole pack, one per thread. tanhf, not the tanh.approx instruction: the float32 path
// must match ATen's to float32 rounding, and the op is bound by memory, not arithmetic.
#include <algorithm>
#include <type_traits>

#include "common/common.cuh"
#include "gelu.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kThreads = 256;
constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

__device__ __forceinline__ float gelu(float x) {
  return 0.5f * x * (1.f + tanhf(kBeta * (x + kKappa * x * x * x)));
}

__device__ __forceinline__ float gelu_grad(float x) {
  const float x2 = x * x, t = tanhf(kBeta * (x + kKappa * x2 * x));
  return 0.5f * (1.f + t) + 0.5f * x * (1.f - t * t) * kBeta * (1.f + 3.f * kKappa * x2);
}

// Forward: a = x (b unused). Backward: a = dy, b = x.
template <typename T, int P, bool kBackward>
__global__ void __launch_bounds__(kThreads)
    gelu_kernel(const T* a, const T* __restrict__ b, int64_t n, T* out) {  // out may alias a (dy)
  const int64_t first = int64_t(blockIdx.x) * kThreads + threadIdx.x, stride = int64_t(gridDim.x) * kThreads;
  const int64_t packs = n / P;
  for (int64_t i = first; i < packs; i += stride) {
    float va[P], vb[P], o[P];
    load_floats<P>(a + i * P, va);
    if constexpr (kBackward) load_floats<P>(b + i * P, vb);
#pragma unroll
    for (int k = 0; k < P; ++k) o[k] = kBackward ? va[k] * gelu_grad(vb[k]) : gelu(va[k]);
    store_floats<P>(out + i * P, o);
  }
  const int64_t j = packs * P + first;  // the tail, shorter than one pack
  if (j < n) out[j] = from_float<T>(kBackward ? to_float(a[j]) * gelu_grad(to_float(b[j])) : gelu(to_float(a[j])));
}

template <bool kBackward>
cudaError_t launch(const void* a, const void* b, DType dtype, int64_t n, void* out, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const auto go = [&](auto* typed) {
    using T = std::remove_pointer_t<decltype(typed)>;
    constexpr int P = 16 / int(sizeof(T));
    const bool packed = is_aligned(a, 16) && is_aligned(b, 16) && is_aligned(out, 16);
    const int64_t units = packed ? std::max<int64_t>(n / P, 1) : n;
    const int64_t grid = std::min<int64_t>((units + kThreads - 1) / kThreads, int64_t(1) << 16);
    if (packed)
      gelu_kernel<T, P, kBackward><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                                  n, static_cast<T*>(out));
    else
      gelu_kernel<T, 1, kBackward><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(a), static_cast<const T*>(b),
                                                                  n, static_cast<T*>(out));
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
