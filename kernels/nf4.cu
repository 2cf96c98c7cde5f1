// Dequantization: a thread per 16 values (8 packed bytes in one load; 16 values never straddle a block
// of 64), the block's absmax computed by each thread from its two codes. The few-row product: a warp per
// few output columns at a time, each lane taking 32 values of a row at a time (16 packed bytes, half a
// block of 64, one absmax), all its loads of the columns in flight before their arithmetic; the levels
// in shared memory, x read through L1; the lanes' sums meet in a shuffle reduction.
#include <algorithm>

#include "common/common.cuh"
#include "nf4.cuh"

namespace llmtrain::kernels {
namespace {

// The dequantized absmax of 64-value block b, as the reference computes it (no fused multiply-add).
__device__ __forceinline__ float block_absmax(const NF4Args& w, const float* dynamic, int64_t b) {
  return __fadd_rn(__fmul_rn(dynamic[w.absmax_codes[b]], w.absmax2[b / 256]), w.offset);
}

template <typename T>
__global__ void __launch_bounds__(256) nf4_dequantize_kernel(NF4Args w, T* __restrict__ out) {
  __shared__ float levels[16], dynamic[256];
  dynamic[threadIdx.x] = w.dynamic[threadIdx.x];
  if (threadIdx.x < 16) levels[threadIdx.x] = w.levels[threadIdx.x];
  __syncthreads();
  const int64_t first = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) * 16;
  if (first >= w.numel) return;
  if (first + 16 <= w.numel) {
    const uint2 bytes = *reinterpret_cast<const uint2*>(w.packed + first / 2);
    const float absmax = block_absmax(w, dynamic, first / 64);
    Pack<T, 8> lo, hi;
    const uint32_t words[2] = {bytes.x, bytes.y};
#pragma unroll
    for (int j = 0; j < 8; ++j) {  // byte j: values 2j (high nibble) and 2j + 1
      const uint32_t b = (words[j / 4] >> (8 * (j % 4))) & 0xff;
      Pack<T, 8>& p = j < 4 ? lo : hi;
      p.v[(2 * j) % 8] = from_float<T>(__fmul_rn(levels[b >> 4], absmax));
      p.v[(2 * j + 1) % 8] = from_float<T>(__fmul_rn(levels[b & 15], absmax));
    }
    *reinterpret_cast<Pack<T, 8>*>(out + first) = lo;
    *reinterpret_cast<Pack<T, 8>*>(out + first + 8) = hi;
    return;
  }
  for (int64_t i = first; i < w.numel; ++i) {  // the tail of a weight whose size is not a multiple of 16
    const uint8_t b = w.packed[i / 2];
    out[i] = from_float<T>(__fmul_rn(levels[i % 2 == 0 ? b >> 4 : b & 15], block_absmax(w, dynamic, i / 64)));
  }
}

constexpr int kGemvWarps = 8;
constexpr int kGemvInFlight = 2;  // 16-byte loads of each weight row a lane issues before using them

// A warp takes R output columns at once and strides over the rest: each lane issues its R x
// kGemvInFlight loads of the rows (and their absmax codes) before any arithmetic, so that a warp has
// R KiB of weight in flight, not one row's few hundred bytes with a dependent chain behind each.
template <typename T, int M, int R>
__global__ void __launch_bounds__(32 * kGemvWarps)
    nf4_gemv_kernel(NF4Args w, int64_t N, int64_t K, const T* __restrict__ x, const T* __restrict__ bias,
                    T* __restrict__ y) {
  __shared__ float levels[16];
  if (threadIdx.x < 16) levels[threadIdx.x] = w.levels[threadIdx.x];
  __syncthreads();
  const int lane = threadIdx.x % 32;
  const int64_t stride = int64_t(gridDim.x) * kGemvWarps * R;
  for (int64_t n0 = (int64_t(blockIdx.x) * kGemvWarps + threadIdx.x / 32) * R; n0 < N; n0 += stride) {
    float acc[R][M] = {};
    for (int64_t k0 = 0; k0 < K; k0 += 32 * 32 * kGemvInFlight) {
      uint4 q[R][kGemvInFlight];
      uint8_t code[R][kGemvInFlight];
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int f = 0; f < kGemvInFlight; ++f) {
          const int64_t k = k0 + (int64_t(f) * 32 + lane) * 32, n = n0 + r;
          if (k < K && n < N) {
            q[r][f] = *reinterpret_cast<const uint4*>(w.packed + n * K / 2 + k / 2);
            code[r][f] = w.absmax_codes[(n * K + k) / 64];
          }
        }
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int f = 0; f < kGemvInFlight; ++f) {
          const int64_t k = k0 + (int64_t(f) * 32 + lane) * 32, n = n0 + r;
          if (k >= K || n >= N) continue;
          const int64_t block = (n * K + k) / 64;
          const float scale =
              __fadd_rn(__fmul_rn(__ldg(w.dynamic + code[r][f]), __ldg(w.absmax2 + block / 256)), w.offset);
          const uint32_t words[4] = {q[r][f].x, q[r][f].y, q[r][f].z, q[r][f].w};
#pragma unroll
          for (int part = 0; part < 4; ++part) {  // 8 values: one 16-byte load of each row of x
            float wv[8];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
              const uint32_t b = (words[part] >> (8 * j)) & 0xff;
              wv[2 * j] = to_float(from_float<T>(__fmul_rn(levels[b >> 4], scale)));
              wv[2 * j + 1] = to_float(from_float<T>(__fmul_rn(levels[b & 15], scale)));
            }
#pragma unroll
            for (int m = 0; m < M; ++m) {
              float xv[8];
              load_floats<8>(x + m * K + k + 8 * part, xv);
#pragma unroll
              for (int j = 0; j < 8; ++j) acc[r][m] = fmaf(wv[j], xv[j], acc[r][m]);
            }
          }
        }
    }
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < M; ++m) {
        const float s = warp_sum(acc[r][m]);
        const int64_t n = n0 + r;
        if (lane == 0 && n < N) y[m * N + n] = from_float<T>(bias ? s + to_float(bias[n]) : s);
      }
  }
}

template <typename T>
cudaError_t dequantize_as(const NF4Args& w, void* out, cudaStream_t stream) {
  const int64_t threads = (w.numel + 15) / 16;
  nf4_dequantize_kernel<T><<<(threads + 255) / 256, 256, 0, stream>>>(w, static_cast<T*>(out));
  return cudaGetLastError();
}

template <typename T, int M, int R>
cudaError_t gemv_launch(const NF4Args& w, int64_t N, int64_t K, const T* x, const T* bias, T* y, int sms,
                        cudaStream_t stream) {
  const int64_t rows_per_block = int64_t(kGemvWarps) * R;
  const dim3 grid(unsigned(std::min<int64_t>((N + rows_per_block - 1) / rows_per_block, int64_t(sms) * 8)));
  nf4_gemv_kernel<T, M, R><<<grid, 32 * kGemvWarps, 0, stream>>>(w, N, K, x, bias, y);
  return cudaGetLastError();
}

// Four columns a warp where the grid still fills every SM with a few blocks; fewer for narrow weights.
template <typename T, int M>
cudaError_t gemv_rows(const NF4Args& w, int64_t N, int64_t K, const T* x, const T* bias, T* y, cudaStream_t stream) {
  static const int sms = [] {
    int device = 0, count = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    return count;
  }();
  if (N >= int64_t(sms) * kGemvWarps * 4 * 2) return gemv_launch<T, M, 4>(w, N, K, x, bias, y, sms, stream);
  if (N >= int64_t(sms) * kGemvWarps * 2) return gemv_launch<T, M, 2>(w, N, K, x, bias, y, sms, stream);
  return gemv_launch<T, M, 1>(w, N, K, x, bias, y, sms, stream);
}

template <typename T>
cudaError_t gemv_as(const NF4Args& w, int64_t M, int64_t N, int64_t K, const void* x, const void* bias, void* y,
                    cudaStream_t stream) {
  const auto* xs = static_cast<const T*>(x);
  const auto* bs = static_cast<const T*>(bias);
  auto* ys = static_cast<T*>(y);
  switch (M) {
    case 1: return gemv_rows<T, 1>(w, N, K, xs, bs, ys, stream);
    case 2: return gemv_rows<T, 2>(w, N, K, xs, bs, ys, stream);
    case 3: return gemv_rows<T, 3>(w, N, K, xs, bs, ys, stream);
    default: return gemv_rows<T, 4>(w, N, K, xs, bs, ys, stream);
  }
}

}  // namespace

cudaError_t launch_nf4_dequantize(const NF4Args& w, DType dtype, void* out, cudaStream_t stream) {
  if (w.numel == 0) return cudaSuccess;
  if (!is_aligned(w.packed, 8) || !is_aligned(out, 16)) return cudaErrorInvalidValue;
  switch (dtype) {
    case DType::kFloat32: return dequantize_as<float>(w, out, stream);
    case DType::kBFloat16: return dequantize_as<__nv_bfloat16>(w, out, stream);
    case DType::kFloat16: return dequantize_as<__half>(w, out, stream);
  }
  return cudaErrorInvalidValue;
}

bool nf4_gemv_fits(int64_t M, int64_t K) { return M >= 1 && M <= kNF4GemvMaxRows && K > 0 && K % 64 == 0; }

cudaError_t launch_nf4_gemv(const NF4Args& w, int64_t M, int64_t N, int64_t K, DType dtype, const void* x,
                            const void* bias, void* y, cudaStream_t stream) {
  if (!nf4_gemv_fits(M, K) || N <= 0 || !is_aligned(x, 16) || !is_aligned(w.packed, 16)) return cudaErrorInvalidValue;
  switch (dtype) {
    case DType::kFloat32: return gemv_as<float>(w, M, N, K, x, bias, y, stream);
    case DType::kBFloat16: return gemv_as<__nv_bfloat16>(w, M, N, K, x, bias, y, stream);
    case DType::kFloat16: return gemv_as<__half>(w, M, N, K, x, bias, y, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace llmtrain::kernels
