// A grid-stride loop over packs of P pairs: each thread loads the head's pack at i and its partner at
// i + D / 2 together with the P angles' cos and sin (the tables are small and shared by every head of a
// token, so they come from L2), and stores both rotated packs.
#include <algorithm>
#include <type_traits>

#include "common/common.cuh"
#include "rotary.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T>
__global__ void __launch_bounds__(kThreads)
    rotary_kernel(const T* x, const float* __restrict__ cos, const float* __restrict__ sin, bool tables_per_row,
                  float sign, int64_t T_len, int64_t heads, int half, int64_t packs, T* y) {
  constexpr int P = 16 / sizeof(T);
  const int per_head = half / P;  // packs in a head's first half
  for (int64_t e = int64_t(blockIdx.x) * kThreads + threadIdx.x; e < packs; e += int64_t(gridDim.x) * kThreads) {
    const int64_t head_row = e / per_head, token = head_row / heads;
    const int c = int(e % per_head) * P;
    const int64_t table = ((tables_per_row ? token : token % T_len) * half) + c;
    const int64_t at = head_row * 2 * half + c;
    float x1[P], x2[P], cs[P], sn[P];
    load_floats<P>(x + at, x1);
    load_floats<P>(x + at + half, x2);
    load_floats<P>(cos + table, cs);
    load_floats<P>(sin + table, sn);
    float y1[P], y2[P];
#pragma unroll
    for (int i = 0; i < P; ++i) {
      const float s = sign * sn[i];
      y1[i] = x1[i] * cs[i] - x2[i] * s;
      y2[i] = x2[i] * cs[i] + x1[i] * s;
    }
    store_floats<P>(y + at, y1);
    store_floats<P>(y + at + half, y2);
  }
}

}  // namespace

bool rotary_fits(DType dtype, int64_t D) { return D > 0 && D % (2 * pack_elements(dtype)) == 0; }

cudaError_t launch_rotary(const void* x, const float* cos, const float* sin, bool tables_per_row, bool inverse,
                          DType dtype, int64_t B, int64_t T, int64_t heads, int64_t D, void* y, cudaStream_t stream) {
  const int64_t packs = B * T * heads * (D / 2) / pack_elements(dtype);
  if (packs == 0) return cudaSuccess;
  if (!rotary_fits(dtype, D) || B < 0 || T < 0 || heads < 0 || !is_aligned(x, 16) || !is_aligned(y, 16) ||
      !is_aligned(cos, 16) || !is_aligned(sin, 16) || cos == nullptr || sin == nullptr)
    return cudaErrorInvalidValue;
  const int64_t grid = std::clamp<int64_t>((packs + kThreads - 1) / kThreads, 1, int64_t(1) << 16);
  with_element_type(dtype, [&](auto* t) {
    using E = std::remove_pointer_t<decltype(t)>;
    rotary_kernel<E><<<grid, kThreads, 0, stream>>>(static_cast<const E*>(x), cos, sin, tables_per_row,
                                                    inverse ? -1.f : 1.f, T, heads, int(D / 2), packs,
                                                    static_cast<E*>(y));
  });
  return cudaGetLastError();
}

}  // namespace llmtrain::kernels
