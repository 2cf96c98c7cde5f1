// One block per row; each thread walks the row in 16-byte vectors when rows are aligned and `cols` is
// a whole number of vectors (GPT-2's padded 50304-wide rows are), else element by element. Block size
// 512: a 50304-wide bf16 row is then about 12 vectors a thread. Each thread loads kGroup vectors before
// it uses any, so that enough bytes are in flight to stream at memory bandwidth, and folds them into
// its running maximum and sum with one rescale a group rather than one an element. Exponentials are
// 2^(x log2(e) - m log2(e)) with the hardware's ex2.approx (one multiply-add and one instruction an
// element; its relative error ~2^-22 is far below the inputs' rounding). Backward reads each element
// and writes its gradient from the same thread, so it may write over the logits themselves.
#include "common/common.cuh"
#include "cross_entropy.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kThreads = 512;
constexpr int kGroup = 4;  // vectors a thread has in flight
constexpr float kLog2e = 1.4426950408889634f;

__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Folds the K values x into a running (max m, sum s of exp(x - m)).
template <int K>
__device__ __forceinline__ void online_add(const float (&x)[K], float& m, float& s) {
  float g = x[0];
#pragma unroll
  for (int k = 1; k < K; ++k) g = fmaxf(g, x[k]);
  if (g > m) {                           // fmaxf skips NaN, which then reaches s through its own term below
    s *= exp2_approx((m - g) * kLog2e);  // m = -inf: s is 0 and stays 0
    m = g;
  }
  const float ml = m == -INFINITY ? 0.f : m * kLog2e;  // so that -inf terms give 0, not -inf + inf
#pragma unroll
  for (int k = 0; k < K; ++k) s += exp2_approx(fmaf(x[k], kLog2e, -ml));
}

template <typename T, int G>
__device__ __forceinline__ void unpack(const Vec<T> (&v)[G], float (&x)[G * Vec<T>::kSize]) {
#pragma unroll
  for (int g = 0; g < G; ++g)
#pragma unroll
    for (int k = 0; k < Vec<T>::kSize; ++k) x[g * Vec<T>::kSize + k] = to_float(v[g].v[k]);
}

template <typename T, bool kVector>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_fwd_kernel(const T* __restrict__ logits, int64_t V, int64_t ld, const int64_t* __restrict__ targets,
                             int64_t ignore_index, float* __restrict__ loss, float* __restrict__ lse) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * ld;
  float m = -INFINITY, s = 0.f;
  int64_t j = threadIdx.x;  // the first element left to the element-by-element loop
  if constexpr (kVector) {
    using V8 = Vec<T>;
    constexpr int P = V8::kSize;
    const V8* vrow = reinterpret_cast<const V8*>(row);
    const int64_t full = V / P;  // whole vectors of classes; the partial last one goes element by element
    int64_t i = threadIdx.x;
    for (; i + (kGroup - 1) * kThreads < full; i += kGroup * kThreads) {
      V8 v[kGroup];
#pragma unroll
      for (int g = 0; g < kGroup; ++g) v[g] = vrow[i + g * kThreads];
      float x[kGroup * P];
      unpack(v, x);
      online_add(x, m, s);
    }
    for (; i < full; i += kThreads) {
      V8 v[1] = {vrow[i]};
      float x[P];
      unpack(v, x);
      online_add(x, m, s);
    }
    j = full * P + threadIdx.x;
  }
  for (; j < V; j += kThreads) {
    const float x[1] = {to_float(row[j])};
    online_add(x, m, s);
  }
  const float row_max = block_max(m, scratch);
  // A thread whose maximum is still -inf has s = 0, or NaN from a NaN logit, which must reach the sum.
  const float sum = block_sum(m == -INFINITY ? s : s * exp2_approx((m - row_max) * kLog2e), scratch);
  if (threadIdx.x == 0) {
    const float l = row_max + logf(sum);
    lse[n] = l;
    const int64_t t = targets[n];
    if (t == ignore_index) loss[n] = 0.f;
    else if (t < 0 || t >= V) loss[n] = NAN;  // never read outside the row
    else loss[n] = l - to_float(row[t]);
  }
}

template <typename T, bool kVector>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_bwd_kernel(const T* logits, int64_t V, int64_t cols, int64_t ld,  // may be dlogits itself
                             const int64_t* __restrict__ targets, int64_t ignore_index, const float* __restrict__ lse,
                             const float* __restrict__ scale, T* dlogits) {
  const int64_t n = blockIdx.x;
  const T* row = logits + n * ld;
  T* drow = dlogits + n * cols;
  const int64_t t = targets[n];
  const bool counted = t != ignore_index;
  const float ll = lse[n] * kLog2e, g = counted ? scale[0] : 0.f;
  const auto grad = [&](int64_t j, float x) {
    if (j >= V || !counted) return 0.f;
    return (exp2_approx(fmaf(x, kLog2e, -ll)) - (j == t ? 1.f : 0.f)) * g;
  };
  if constexpr (kVector) {
    using V8 = Vec<T>;
    constexpr int P = V8::kSize;
    const V8* vrow = reinterpret_cast<const V8*>(row);
    V8* vdrow = reinterpret_cast<V8*>(drow);
    const auto write = [&](int64_t i, const V8& v) {
      V8 out;
#pragma unroll
      for (int k = 0; k < P; ++k) out.v[k] = from_float<T>(grad(i * P + k, to_float(v.v[k])));
      vdrow[i] = out;
    };
    const int64_t vecs = cols / P;
    int64_t i = threadIdx.x;
    // A thread reads and writes only its own vectors, so its loads may all go ahead of its stores even
    // when the gradient replaces the logits.
    for (; i + (kGroup - 1) * kThreads < vecs; i += kGroup * kThreads) {
      V8 v[kGroup];
#pragma unroll
      for (int k = 0; k < kGroup; ++k) v[k] = vrow[i + k * kThreads];
#pragma unroll
      for (int k = 0; k < kGroup; ++k) write(i + k * kThreads, v[k]);
    }
    for (; i < vecs; i += kThreads) write(i, vrow[i]);
  } else {
    for (int64_t j = threadIdx.x; j < cols; j += kThreads)
      drow[j] = from_float<T>(grad(j, j < V ? to_float(row[j]) : 0.f));
  }
}

template <typename T>
bool vectorizable(const void* p, int64_t cols, int64_t ld) {
  return rows_aligned<T>(p, ld) && cols % Vec<T>::kSize == 0;
}

template <typename T>
cudaError_t fwd(const void* logits, int64_t N, int64_t V, int64_t cols, int64_t ld, const int64_t* targets,
                int64_t ignore_index, float* loss, float* lse, cudaStream_t stream) {
  const T* p = static_cast<const T*>(logits);
  if (vectorizable<T>(p, cols, ld))
    cross_entropy_fwd_kernel<T, true><<<N, kThreads, 0, stream>>>(p, V, ld, targets, ignore_index, loss, lse);
  else cross_entropy_fwd_kernel<T, false><<<N, kThreads, 0, stream>>>(p, V, ld, targets, ignore_index, loss, lse);
  return cudaGetLastError();
}

template <typename T>
cudaError_t bwd(const void* logits, int64_t N, int64_t V, int64_t cols, int64_t ld, const int64_t* targets,
                int64_t ignore_index, const float* lse, const float* scale, void* dlogits, cudaStream_t stream) {
  const T* p = static_cast<const T*>(logits);
  T* d = static_cast<T*>(dlogits);
  if (vectorizable<T>(p, cols, ld) && vectorizable<T>(d, cols, cols))
    cross_entropy_bwd_kernel<T, true><<<N, kThreads, 0, stream>>>(p, V, cols, ld, targets, ignore_index, lse, scale, d);
  else
    cross_entropy_bwd_kernel<T, false>
        <<<N, kThreads, 0, stream>>>(p, V, cols, ld, targets, ignore_index, lse, scale, d);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_cross_entropy_fwd(const void* logits, DType dtype, int64_t N, int64_t V, int64_t cols, int64_t ld,
                                     const int64_t* targets, int64_t ignore_index, float* loss, float* lse,
                                     cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32: return fwd<float>(logits, N, V, cols, ld, targets, ignore_index, loss, lse, stream);
    case DType::kBFloat16: return fwd<__nv_bfloat16>(logits, N, V, cols, ld, targets, ignore_index, loss, lse, stream);
    case DType::kFloat16: return fwd<__half>(logits, N, V, cols, ld, targets, ignore_index, loss, lse, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_cross_entropy_bwd(const void* logits, DType dtype, int64_t N, int64_t V, int64_t cols, int64_t ld,
                                     const int64_t* targets, int64_t ignore_index, const float* lse, const float* scale,
                                     void* dlogits, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32: return bwd<float>(logits, N, V, cols, ld, targets, ignore_index, lse, scale, dlogits, stream);
    case DType::kBFloat16:
      return bwd<__nv_bfloat16>(logits, N, V, cols, ld, targets, ignore_index, lse, scale, dlogits, stream);
    case DType::kFloat16:
      return bwd<__half>(logits, N, V, cols, ld, targets, ignore_index, lse, scale, dlogits, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace llmtrain::kernels
