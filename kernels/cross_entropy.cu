// One block per row; each thread walks the row in 16-byte vectors when rows are aligned and `cols` is
// a whole number of vectors (GPT-2's padded 50304-wide rows are), else element by element. Vector
// reads never pass column `cols`, so they stay inside the row. Block size 512: a 50304-wide bf16 row is then
// about 12 vector loads per thread, enough in flight to stream at memory bandwidth. Backward reads each
// element and writes its gradient from the same thread, so it may write over the logits themselves.
#include "common/common.cuh"
#include "cross_entropy.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kThreads = 512;

// Folds x into a running (max, sum of exp(x - max)).
__device__ __forceinline__ void online_add(float x, float& m, float& s) {
  if (x > m) {
    s = s * __expf(m - x) + 1.f;
    m = x;
  } else {
    s += __expf(x - m);
  }
}

template <typename T, bool kVector>
__global__ void __launch_bounds__(kThreads)
    cross_entropy_fwd_kernel(const T* __restrict__ logits, int64_t V, int64_t ld, const int64_t* __restrict__ targets,
                             int64_t ignore_index, float* __restrict__ loss, float* __restrict__ lse) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* row = logits + n * ld;
  float m = -INFINITY, s = 0.f;
  if constexpr (kVector) {
    using V8 = Vec<T>;
    const V8* vrow = reinterpret_cast<const V8*>(row);
    const int64_t vecs = (V + V8::kSize - 1) / V8::kSize;  // the last may reach into the padding
    for (int64_t i = threadIdx.x; i < vecs; i += kThreads) {
      const V8 v = vrow[i];
#pragma unroll
      for (int k = 0; k < V8::kSize; ++k)
        if (i * V8::kSize + k < V) online_add(to_float(v.v[k]), m, s);
    }
  } else {
    for (int64_t j = threadIdx.x; j < V; j += kThreads) online_add(to_float(row[j]), m, s);
  }
  const float row_max = block_max(m, scratch);
  const float sum = block_sum(m == -INFINITY ? 0.f : s * __expf(m - row_max), scratch);
  if (threadIdx.x == 0) {
    const float l = row_max + logf(sum);
    lse[n] = l;
    const int64_t t = targets[n];
    if (t == ignore_index)
      loss[n] = 0.f;
    else if (t < 0 || t >= V)
      loss[n] = NAN;  // never read outside the row
    else
      loss[n] = l - to_float(row[t]);
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
  const float l = lse[n], g = counted ? scale[0] : 0.f;
  const auto grad = [&](int64_t j, float x) {
    if (j >= V || !counted) return 0.f;
    return (__expf(x - l) - (j == t ? 1.f : 0.f)) * g;
  };
  if constexpr (kVector) {
    using V8 = Vec<T>;
    const V8* vrow = reinterpret_cast<const V8*>(row);
    V8* vdrow = reinterpret_cast<V8*>(drow);
    for (int64_t i = threadIdx.x; i < cols / V8::kSize; i += kThreads) {
      const V8 v = vrow[i];
      V8 out;
#pragma unroll
      for (int k = 0; k < V8::kSize; ++k) out.v[k] = from_float<T>(grad(i * V8::kSize + k, to_float(v.v[k])));
      vdrow[i] = out;
    }
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
  else
    cross_entropy_fwd_kernel<T, false><<<N, kThreads, 0, stream>>>(p, V, ld, targets, ignore_index, loss, lse);
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
    case DType::kFloat32:
      return fwd<float>(logits, N, V, cols, ld, targets, ignore_index, loss, lse, stream);
    case DType::kBFloat16:
      return fwd<__nv_bfloat16>(logits, N, V, cols, ld, targets, ignore_index, loss, lse, stream);
    case DType::kFloat16:
      return fwd<__half>(logits, N, V, cols, ld, targets, ignore_index, loss, lse, stream);
  }
  return cudaErrorInvalidValue;
}

cudaError_t launch_cross_entropy_bwd(const void* logits, DType dtype, int64_t N, int64_t V, int64_t cols, int64_t ld,
                                     const int64_t* targets, int64_t ignore_index, const float* lse, const float* scale,
                                     void* dlogits, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  switch (dtype) {
    case DType::kFloat32:
      return bwd<float>(logits, N, V, cols, ld, targets, ignore_index, lse, scale, dlogits, stream);
    case DType::kBFloat16:
      return bwd<__nv_bfloat16>(logits, N, V, cols, ld, targets, ignore_index, lse, scale, dlogits, stream);
    case DType::kFloat16:
      return bwd<__half>(logits, N, V, cols, ld, targets, ignore_index, lse, scale, dlogits, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace llmtrain::kernels
