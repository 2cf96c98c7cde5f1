// One warp per row, 8 warps per block. Lane l holds packs l, l + 32, l + 64, ... of P elements (P = 16
// bytes of the row's type when C is a multiple of it, else 1): kV packs, a template argument, so that the
// row stays in registers. Backward: one row a warp, as forward; the block then adds its 8 rows' dweight
// and dbias terms through shared memory in warp order, and the finish kernel adds the blocks' partials
// in a fixed order. More rows a warp, accumulated in registers, measured slower on the H200: the
// accumulators cost occupancy, and the block's lifetime grows (docs/DEVELOPMENT.md).
#include <type_traits>

#include "common/common.cuh"
#include "layer_norm.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

template <typename T, typename W, int P, int kV, bool kRms>
__global__ void __launch_bounds__(kThreads)
    layer_norm_fwd_kernel(const T* __restrict__ x, const T* __restrict__ delta, const W* __restrict__ weight,
                          const W* __restrict__ bias, int64_t N, int C, float eps, T* __restrict__ h,
                          T* __restrict__ out, float* __restrict__ mean_out, float* __restrict__ rstd_out) {
  const int lane = threadIdx.x % 32;
  const int64_t n = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (n >= N) return;  // no block-wide barrier below
  const int64_t row = n * C;
  float v[kV][P];
  float sum = 0.f;
#pragma unroll
  for (int k = 0; k < kV; ++k) {
    const int c = (lane + 32 * k) * P;
    if (c >= C) continue;
    load_floats<P>(x + row + c, v[k]);
    if (delta != nullptr) {
      float d[P];
      load_floats<P>(delta + row + c, d);
#pragma unroll
      for (int i = 0; i < P; ++i) v[k][i] = to_float(from_float<T>(v[k][i] + d[i]));  // h as stored
      store_floats<P>(h + row + c, v[k]);
    }
#pragma unroll
    for (int i = 0; i < P; ++i) sum += v[k][i];
  }
  const float mean = kRms ? 0.f : warp_sum(sum) / float(C);  // RMS: the squares' mean about zero
  float sq = 0.f;
#pragma unroll
  for (int k = 0; k < kV; ++k) {
    if ((lane + 32 * k) * P >= C) continue;
#pragma unroll
    for (int i = 0; i < P; ++i) sq += (v[k][i] - mean) * (v[k][i] - mean);
  }
  const float rstd = rsqrtf(warp_sum(sq) / float(C) + eps);
#pragma unroll
  for (int k = 0; k < kV; ++k) {
    const int c = (lane + 32 * k) * P;
    if (c >= C) continue;
    float w[P], b[P] = {}, o[P];
    load_floats<P>(weight + c, w);
    if constexpr (!kRms) load_floats<P>(bias + c, b);
#pragma unroll
    for (int i = 0; i < P; ++i) o[i] = (v[k][i] - mean) * rstd * w[i] + b[i];
    store_floats<P>(out + row + c, o);
  }
  if (lane == 0) {
    mean_out[n] = mean;
    rstd_out[n] = rstd;
  }
}

template <typename T, typename W, int P, int kV, bool kRms>
__global__ void __launch_bounds__(kThreads)
    layer_norm_bwd_kernel(const T* __restrict__ dout, const T* __restrict__ h, const T* __restrict__ dh_in,
                          const W* __restrict__ weight, const float* __restrict__ mean, const float* __restrict__ rstd,
                          int64_t N, int C, T* __restrict__ dh, float* __restrict__ partial_dw,
                          float* __restrict__ partial_db) {
  constexpr int kCW = 32 * P * kV;  // the row as the lanes cover it
  extern __shared__ float rows[];   // (kWarps, kCW): each warp's row of dout * hhat, then of dout
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t n = int64_t(blockIdx.x) * kWarps + warp;
  Pack<T, P> go[kV], hv[kV];  // kept as stored (half the registers of floats for 16-bit types)
  float mu = 0.f, rs = 0.f;
  if (n < N) {
    const int64_t row = n * C;
    mu = mean[n];
    rs = rstd[n];
    float sum_g = 0.f, sum_gh = 0.f;
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      const int c = (lane + 32 * k) * P;
      if (c >= C) continue;
      go[k] = *reinterpret_cast<const Pack<T, P>*>(dout + row + c);
      hv[k] = *reinterpret_cast<const Pack<T, P>*>(h + row + c);
      float w[P];
      load_floats<P>(weight + c, w);
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const float g = to_float(go[k].v[i]) * w[i];
        sum_g += g;
        sum_gh += g * (to_float(hv[k].v[i]) - mu) * rs;
      }
    }
    const float mean_g = warp_sum(sum_g) / float(C), mean_gh = warp_sum(sum_gh) / float(C);
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      const int c = (lane + 32 * k) * P;
      if (c >= C) continue;
      float w[P], d[P];
      load_floats<P>(weight + c, w);
      if (dh_in != nullptr) {
        load_floats<P>(dh_in + row + c, d);
      } else {
#pragma unroll
        for (int i = 0; i < P; ++i) d[i] = 0.f;
      }
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const float g = to_float(go[k].v[i]), hat = (to_float(hv[k].v[i]) - mu) * rs;
        d[i] += rs * (g * w[i] - (kRms ? 0.f : mean_g) - hat * mean_gh);
      }
      store_floats<P>(dh + row + c, d);
    }
  }
  // The block's partial sums over its rows, warp 0's row first (a fixed order): dweight's terms, then
  // dbias's (none for RMS), from the row still in registers.
  for (int pass = 0; pass < (kRms ? 1 : 2); ++pass) {
    float* mine = rows + warp * kCW;
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      const int c = (lane + 32 * k) * P;
      if (c >= C) continue;
#pragma unroll
      for (int i = 0; i < P; ++i) {
        const float g = to_float(go[k].v[i]);
        mine[c + i] = n >= N ? 0.f : pass == 0 ? g * (to_float(hv[k].v[i]) - mu) * rs : g;
      }
    }
    __syncthreads();
    float* partial = pass == 0 ? partial_dw : partial_db;
    for (int c = threadIdx.x; c < C; c += kThreads) {
      float sum = 0.f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += rows[w * kCW + c];
      partial[blockIdx.x * int64_t(C) + c] = sum;
    }
    __syncthreads();  // rows are rewritten by the next pass
  }
}

constexpr int kFinishCols = 8, kFinishRuns = 128;

// Block (kFinishCols, kFinishRuns): threadIdx.x a column of the block's 8, threadIdx.y one of 128
// interleaved runs of the partial rows (8 columns of 4 runs make a warp: 32-byte pieces of rows); the
// runs' sums are then added by a fixed tree.
template <typename W>
__global__ void __launch_bounds__(kFinishCols* kFinishRuns)
    layer_norm_bwd_finish_kernel(const float* __restrict__ partial_dw, const float* __restrict__ partial_db,
                                 int64_t blocks, int64_t C, W* __restrict__ dweight, W* __restrict__ dbias) {
  __shared__ float sw[kFinishRuns][kFinishCols], sb[kFinishRuns][kFinishCols];
  const int x = threadIdx.x, y = threadIdx.y;
  const int64_t c = blockIdx.x * kFinishCols + x;
  float a = 0.f, b = 0.f;
  if (c < C)
    for (int64_t k = y; k < blocks; k += kFinishRuns) {
      a += partial_dw[k * C + c];
      if (partial_db != nullptr) b += partial_db[k * C + c];
    }
  sw[y][x] = a;
  sb[y][x] = b;
  for (int half = kFinishRuns / 2; half > 0; half /= 2) {
    __syncthreads();
    if (y < half) {
      sw[y][x] = a += sw[y + half][x];
      sb[y][x] = b += sb[y + half][x];
    }
  }
  if (y != 0 || c >= C) return;
  dweight[c] = from_float<W>(a);
  if (dbias != nullptr) dbias[c] = from_float<W>(b);
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

template <int V>
using Int = std::integral_constant<int, V>;

// Calls f(Int<kV>{}) with the smallest listed kV >= need.
template <int First, int... Rest, typename F>
void pick(int64_t need, F&& f) {
  if constexpr (sizeof...(Rest) == 0) {
    f(Int<First>{});
  } else {
    if (need <= First) f(Int<First>{});
    else pick<Rest...>(need, f);
  }
}

// Checks C, then calls f(T*, W*, Int<P>, Int<kV>) with null pointers of the dtypes asked for: rows in
// 16-byte packs when C is a whole number of them and the pointers are aligned, else element by element.
template <typename F>
cudaError_t launch_typed(DType dtype, DType wdtype, int64_t N, int64_t C, bool aligned, F&& f) {
  if (!layer_norm_fits(dtype, C)) return cudaErrorInvalidValue;
  if (N == 0) return cudaSuccess;
  bool fits = true;
  const bool ok = dispatch(dtype, wdtype, [&](auto* t, auto* w) {
    constexpr int P = 16 / int(sizeof(*t));
    if (aligned && C % P == 0) {
      pick<1, 2, 3, 4, 5, 7, 8>((C / P + 31) / 32, [&](auto kv) { f(t, w, Int<P>{}, kv); });
    } else if (C <= 1024) {
      pick<1, 8, 32>((C + 31) / 32, [&](auto kv) { f(t, w, Int<1>{}, kv); });
    } else {
      fits = false;  // wide rows need the packed path
    }
  });
  if (!ok || !fits) return cudaErrorInvalidValue;
  return cudaGetLastError();
}

bool all_aligned(std::initializer_list<const void*> ptrs) {
  for (const void* p : ptrs)
    if (!is_aligned(p, 16)) return false;
  return true;
}

}  // namespace

bool layer_norm_fits(DType dtype, int64_t C) {
  return C >= 1 && (C <= 1024 || (dtype != DType::kFloat32 && C % 8 == 0 && C <= 2048));
}

int64_t layer_norm_bwd_blocks(int64_t N) { return (N + kWarps - 1) / kWarps; }

cudaError_t launch_layer_norm_fwd(const void* x, const void* delta, const void* weight, const void* bias, DType dtype,
                                  DType wdtype, int64_t N, int64_t C, float eps, void* h, void* out, float* mean,
                                  float* rstd, cudaStream_t stream) {
  if (delta != nullptr && h == nullptr) return cudaErrorInvalidValue;
  const bool aligned = all_aligned({x, delta, weight, bias, h, out});
  return launch_typed(dtype, wdtype, N, C, aligned, [&](auto* t, auto* w, auto p, auto kv) {
    using T = std::remove_pointer_t<decltype(t)>;
    using W = std::remove_pointer_t<decltype(w)>;
    const int64_t grid = (N + kWarps - 1) / kWarps;
    const auto go = [&](auto kernel) {
      kernel<<<grid, kThreads, 0, stream>>>(static_cast<const T*>(x), static_cast<const T*>(delta),
                                            static_cast<const W*>(weight), static_cast<const W*>(bias), N, int(C), eps,
                                            static_cast<T*>(h), static_cast<T*>(out), mean, rstd);
    };
    constexpr int P = decltype(p)::value, kV = decltype(kv)::value;
    if (bias == nullptr) go(layer_norm_fwd_kernel<T, W, P, kV, true>);
    else go(layer_norm_fwd_kernel<T, W, P, kV, false>);
  });
}

cudaError_t launch_layer_norm_bwd(const void* dout, const void* h, const void* dh_in, const void* weight,
                                  const float* mean, const float* rstd, DType dtype, DType wdtype, int64_t N, int64_t C,
                                  void* dh, float* partial_dw, float* partial_db, cudaStream_t stream) {
  const bool aligned = all_aligned({dout, h, dh_in, weight, dh});
  cudaError_t setup = cudaSuccess;
  const cudaError_t launched = launch_typed(dtype, wdtype, N, C, aligned, [&](auto* t, auto* w, auto p, auto kv) {
    using T = std::remove_pointer_t<decltype(t)>;
    using W = std::remove_pointer_t<decltype(w)>;
    constexpr int P = decltype(p)::value, kV = decltype(kv)::value;
    constexpr int smem = kWarps * 32 * P * kV * int(sizeof(float));
    const auto go = [&](auto rms) {  // a type per kind: the static below is each kernel's own
      const auto kernel = layer_norm_bwd_kernel<T, W, P, kV, decltype(rms)::value>;
      if constexpr (smem > 48 * 1024) {  // wide rows: more than the default limit of shared memory
        static const cudaError_t raised =
            cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
        if ((setup = raised) != cudaSuccess) return;
      }
      kernel<<<layer_norm_bwd_blocks(N), kThreads, smem, stream>>>(
          static_cast<const T*>(dout), static_cast<const T*>(h), static_cast<const T*>(dh_in),
          static_cast<const W*>(weight), mean, rstd, N, int(C), static_cast<T*>(dh), partial_dw, partial_db);
    };
    if (partial_db == nullptr) go(std::true_type{});
    else go(std::false_type{});
  });
  return setup != cudaSuccess ? setup : launched;
}

cudaError_t launch_layer_norm_bwd_finish(const float* partial_dw, const float* partial_db, int64_t blocks, int64_t C,
                                         DType wdtype, void* dweight, void* dbias, cudaStream_t stream) {
  const dim3 threads(kFinishCols, kFinishRuns);
  const int64_t grid = (C + kFinishCols - 1) / kFinishCols;
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
