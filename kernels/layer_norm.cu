// Block of 256 threads per row in forward (thread t takes columns t, t + 256, ...); in backward a block
// takes a fixed run of rows one after another, so that its threads can add dweight and dbias for their
// own columns in registers, in row order.
#include <type_traits>

#include "common/common.cuh"
#include "layer_norm.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kRowsPerBlock = 32;

// kCols: columns per thread (C <= kCols * kThreads), a template argument so that the per-thread arrays
// stay in registers.
template <typename T, typename W, int kCols>
__global__ void __launch_bounds__(kThreads)
    layer_norm_fwd_kernel(const T* __restrict__ x, const W* __restrict__ weight, const W* __restrict__ bias, int64_t C,
                          float eps, T* __restrict__ out, float* __restrict__ mean_out, float* __restrict__ rstd_out) {
  __shared__ float scratch[32];
  const int64_t n = blockIdx.x;
  const T* row = x + n * C;
  float v[kCols];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * kThreads;
    v[k] = j < C ? to_float(row[j]) : 0.f;
    sum += v[k];
  }
  const float mean = block_sum(sum, scratch) / float(C);
  float sq = 0.f;
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * kThreads;
    const float d = j < C ? v[k] - mean : 0.f;
    sq += d * d;
  }
  const float rstd = rsqrtf(block_sum(sq, scratch) / float(C) + eps);
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * kThreads;
    if (j < C) out[n * C + j] = from_float<T>((v[k] - mean) * rstd * to_float(weight[j]) + to_float(bias[j]));
  }
  if (threadIdx.x == 0) {
    mean_out[n] = mean;
    rstd_out[n] = rstd;
  }
}

template <typename T, typename W, int kCols>
__global__ void __launch_bounds__(kThreads)
    layer_norm_bwd_kernel(const T* __restrict__ dout, const T* __restrict__ x, const W* __restrict__ weight,
                          const float* __restrict__ mean, const float* __restrict__ rstd, int64_t N, int64_t C,
                          T* __restrict__ dx, float* __restrict__ partial_dw, float* __restrict__ partial_db) {
  __shared__ float scratch[32];
  float dw[kCols], db[kCols], w[kCols];
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * kThreads;
    dw[k] = db[k] = 0.f;
    w[k] = j < C ? to_float(weight[j]) : 0.f;
  }
  const int64_t first = blockIdx.x * kRowsPerBlock, last = min(first + kRowsPerBlock, N);
  for (int64_t n = first; n < last; ++n) {
    const float mu = mean[n], rs = rstd[n];
    float xhat[kCols], g[kCols], go[kCols];
    float sum_g = 0.f, sum_gx = 0.f;
#pragma unroll
    for (int k = 0; k < kCols; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * kThreads;
      go[k] = j < C ? to_float(dout[n * C + j]) : 0.f;
      xhat[k] = j < C ? (to_float(x[n * C + j]) - mu) * rs : 0.f;
      g[k] = go[k] * w[k];
      sum_g += g[k];
      sum_gx += g[k] * xhat[k];
    }
    const float mean_g = block_sum(sum_g, scratch) / float(C);
    const float mean_gx = block_sum(sum_gx, scratch) / float(C);
#pragma unroll
    for (int k = 0; k < kCols; ++k) {
      const int64_t j = threadIdx.x + int64_t(k) * kThreads;
      if (j < C) dx[n * C + j] = from_float<T>(rs * (g[k] - mean_g - xhat[k] * mean_gx));
      dw[k] += go[k] * xhat[k];
      db[k] += go[k];
    }
  }
#pragma unroll
  for (int k = 0; k < kCols; ++k) {
    const int64_t j = threadIdx.x + int64_t(k) * kThreads;
    if (j < C) {
      partial_dw[blockIdx.x * C + j] = dw[k];
      partial_db[blockIdx.x * C + j] = db[k];
    }
  }
}

template <typename W>
__global__ void layer_norm_bwd_finish_kernel(const float* __restrict__ partial_dw, const float* __restrict__ partial_db,
                                             int64_t blocks, int64_t C, W* __restrict__ dweight,
                                             W* __restrict__ dbias) {
  const int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (j >= C) return;
  float sw = 0.f, sb = 0.f;
  for (int64_t b = 0; b < blocks; ++b) {  // consecutive threads read consecutive columns: coalesced
    sw += partial_dw[b * C + j];
    sb += partial_db[b * C + j];
  }
  dweight[j] = from_float<W>(sw);
  dbias[j] = from_float<W>(sb);
}

// Calls f with a null T* and W* of the dtypes asked for; false for a pair without a kernel.
template <typename F>
bool dispatch(DType dtype, DType wdtype, F&& f) {
  if (dtype == DType::kFloat32 && wdtype == DType::kFloat32)
    return f(static_cast<float*>(nullptr), static_cast<float*>(nullptr)), true;
  if (dtype == DType::kBFloat16 && wdtype == DType::kBFloat16)
    return f(static_cast<__nv_bfloat16*>(nullptr), static_cast<__nv_bfloat16*>(nullptr)), true;
  if (dtype == DType::kBFloat16 && wdtype == DType::kFloat32)
    return f(static_cast<__nv_bfloat16*>(nullptr), static_cast<float*>(nullptr)), true;
  if (dtype == DType::kFloat16 && wdtype == DType::kFloat16)
    return f(static_cast<__half*>(nullptr), static_cast<__half*>(nullptr)), true;
  if (dtype == DType::kFloat16 && wdtype == DType::kFloat32)
    return f(static_cast<__half*>(nullptr), static_cast<float*>(nullptr)), true;
  return false;
}

// Checks C and N, then calls f(T*, W*, std::integral_constant<int, K>) with null pointers of the dtypes
// asked for and the smallest K of 3, 4, 8, 16 with K * kThreads >= C.
template <typename F>
cudaError_t launch_typed(DType dtype, DType wdtype, int64_t N, int64_t C, F&& f) {
  if (C < 1 || C > kLayerNormMaxC) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  const bool ok = dispatch(dtype, wdtype, [&](auto* t, auto* w) {
    if (C <= 3 * kThreads)
      f(t, w, std::integral_constant<int, 3>{});
    else if (C <= 4 * kThreads)
      f(t, w, std::integral_constant<int, 4>{});
    else if (C <= 8 * kThreads)
      f(t, w, std::integral_constant<int, 8>{});
    else
      f(t, w, std::integral_constant<int, 16>{});
  });
  return ok ? cudaGetLastError() : cudaErrorInvalidValue;
}

}  // namespace

int64_t layer_norm_bwd_blocks(int64_t N) { return (N + kRowsPerBlock - 1) / kRowsPerBlock; }

cudaError_t launch_layer_norm_fwd(const void* x, const void* weight, const void* bias, DType dtype, DType wdtype,
                                  int64_t N, int64_t C, float eps, void* out, float* mean, float* rstd,
                                  cudaStream_t stream) {
  return launch_typed(dtype, wdtype, N, C, [&](auto* t, auto* w, auto k) {
    using T = std::remove_pointer_t<decltype(t)>;
    using W = std::remove_pointer_t<decltype(w)>;
    layer_norm_fwd_kernel<T, W, decltype(k)::value>
        <<<N, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const W*>(weight),
                                     static_cast<const W*>(bias), C, eps, static_cast<T*>(out), mean, rstd);
  });
}

cudaError_t launch_layer_norm_bwd(const void* dout, const void* x, const void* weight, const float* mean,
                                  const float* rstd, DType dtype, DType wdtype, int64_t N, int64_t C, void* dx,
                                  float* partial_dw, float* partial_db, cudaStream_t stream) {
  return launch_typed(dtype, wdtype, N, C, [&](auto* t, auto* w, auto k) {
    using T = std::remove_pointer_t<decltype(t)>;
    using W = std::remove_pointer_t<decltype(w)>;
    layer_norm_bwd_kernel<T, W, decltype(k)::value><<<layer_norm_bwd_blocks(N), kThreads, 0, stream>>>(
        static_cast<const T*>(dout), static_cast<const T*>(x), static_cast<const W*>(weight), mean, rstd, N, C,
        static_cast<T*>(dx), partial_dw, partial_db);
  });
}

cudaError_t launch_layer_norm_bwd_finish(const float* partial_dw, const float* partial_db, int64_t blocks, int64_t C,
                                         DType wdtype, void* dweight, void* dbias, cudaStream_t stream) {
  const int threads = 256;
  const int64_t grid = (C + threads - 1) / threads;
  switch (wdtype) {
    case DType::kFloat32:
      layer_norm_bwd_finish_kernel<float><<<grid, threads, 0, stream>>>(
          partial_dw, partial_db, blocks, C, static_cast<float*>(dweight), static_cast<float*>(dbias));
      break;
    case DType::kBFloat16:
      layer_norm_bwd_finish_kernel<__nv_bfloat16><<<grid, threads, 0, stream>>>(
          partial_dw, partial_db, blocks, C, static_cast<__nv_bfloat16*>(dweight), static_cast<__nv_bfloat16*>(dbias));
      break;
    case DType::kFloat16:
      layer_norm_bwd_finish_kernel<__half><<<grid, threads, 0, stream>>>(
          partial_dw, partial_db, blocks, C, static_cast<__half*>(dweight), static_cast<__half*>(dbias));
      break;
  }
  return cudaGetLastError();
}

}  // namespace llmtrain::kernels
