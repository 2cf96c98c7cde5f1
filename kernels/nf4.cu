// Dequantization: a thread per 16 values (8 packed bytes in one load; 16 values never straddle a block
// of 64), the block's absmax computed by each thread from its two codes. The few-row product runs on the
// tensor cores (mma.sync m16n8k16: x as A, its rows up to 8 of A's 16; 8 weight rows as B), so that what
// is left for the SM's other units is only a table lookup per packed byte: each byte names a pair of
// levels, one 32-bit word that is a B register as it stands. The table holds each byte's word once for
// each lane (32 KiB), which makes the lookups conflict-free; a scalar-unit dequantization (two lookups,
// two conversions and two multiply-adds a byte) left the previous kernel at a fifth of the bandwidth.
#include <algorithm>
#include <type_traits>

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

constexpr int kGemvWarps = 16;  // the lookup table's fill below gives warp w the low nibble w
constexpr int kGemvThreads = 32 * kGemvWarps;

// The 16 bits of a level rounded to T, the tensor cores' input type.
template <typename T>
__device__ __forceinline__ uint32_t level_bits(float v) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) return __bfloat16_as_ushort(__float2bfloat16_rn(v));
  else return __half_as_ushort(__float2half_rn(v));
}

// d += A B for m16n8k16 (A 16 x 16 row-major, B 16 x 8 column-major, T in, float32 sums): a0..a3 hold
// rows (groupID, groupID + 8) at k pairs (2t, 2t+1) and then (2t+8, 2t+9); b0, b1 column groupID's.
template <typename T>
__device__ __forceinline__ void mma_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  else
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Each warp takes a tile of 16 weight rows (A) over kChunk blocks of 64 at a time (the tile's other
// blocks go to the tile's other warps; a block holds 16 / warps-per-tile tiles at once and strides over
// the rest); x is B, its row g column g. Lane (g, t) loads its 8 packed bytes of each block of rows g
// and g + 8, values 16t..16t+15, all 2 x kChunk loads in flight before any arithmetic; byte m of them
// feeds the mma's k pair of value 2m (which k an mma calls which value is free, as long as A and B
// agree). A 64-value block is four mmas whose sums the lane scales by rows g and g + 8's absmaxes.
template <typename T, int kChunk>
__global__ void __launch_bounds__(kGemvThreads, 2)
    nf4_gemv_kernel(NF4Args w, int M, int64_t N, int K, const T* __restrict__ x, const T* __restrict__ bias,
                    T* __restrict__ y) {
  __shared__ uint32_t lut[256 * 32];  // byte b's two levels (high nibble in the low half) at [b * 32 + lane]
  __shared__ float dynamic[256];
  __shared__ float2 scales[kGemvWarps][kChunk * 8];  // [warp][block of the chunk * 8 + g]: rows g, g + 8
  __shared__ float sums[kGemvWarps][16][8];          // [warp][row of the tile][row of x]
  let_dependents_start();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, t = lane % 4;
  {  // entry i * 512 + tid is byte i * 16 + warp for lane `lane`: its own copy, so lookups never conflict
    const uint32_t low = level_bits<T>(__ldg(w.levels + warp));
#pragma unroll
    for (int i = 0; i < 16; ++i) lut[i * kGemvThreads + tid] = level_bits<T>(__ldg(w.levels + i)) | low << 16;
    if (tid < 256) dynamic[tid] = __ldg(w.dynamic + tid);
  }
  __syncthreads();
  const int blocks = K / 64, per_tile = min(kGemvWarps, (blocks + kChunk - 1) / kChunk);
  const int at_once = kGemvWarps / per_tile, slot = warp / per_tile, part = warp % per_tile;
  const int64_t tiles = (N + 15) / 16, turns = (tiles + at_once - 1) / at_once;
  const char* lut_bytes = reinterpret_cast<const char*>(lut);
  const uint32_t lane4 = uint32_t(lane) * 4;
  // Byte s of `word`'s pair of levels: its table offset b * 128 ORed with the lane's 4 * lane.
  const auto pair = [&](uint32_t word, int s) {
    const uint32_t off = (s == 0 ? word << 7 : word >> (8 * s - 7)) & 0x7f80u;
    return *reinterpret_cast<const uint32_t*>(lut_bytes + (off | lane4));
  };
  const T* xs = x + int64_t(g) * K + t * 16;
  bool waited = false;  // for the kernel before: x and y are read and written only after it
  for (int64_t turn = blockIdx.x; turn < turns; turn += gridDim.x) {
    const int64_t tile = turn * at_once + slot, n0 = tile * 16;
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    if (slot < at_once && tile < tiles) {
      const bool ok0 = n0 + g < N, ok1 = n0 + g + 8 < N;
      const uint8_t* row0 = w.packed + (n0 + g) * (K / 2) + t * 8;
      const uint8_t* row1 = row0 + int64_t(8) * (K / 2);
      for (int c0 = part * kChunk; c0 < blocks; c0 += per_tile * kChunk) {
        uint2 codes[kChunk][2];
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
          const bool in = c0 + i < blocks;
          codes[i][0] = ok0 && in ? __ldcs(reinterpret_cast<const uint2*>(row0 + (c0 + i) * 32)) : make_uint2(0, 0);
          codes[i][1] = ok1 && in ? __ldcs(reinterpret_cast<const uint2*>(row1 + (c0 + i) * 32)) : make_uint2(0, 0);
        }
        for (int e = lane; e < kChunk * 16; e += 32) {  // entry e: block e / 16 of the chunk, tile row e % 16
          const int b = c0 + e / 16;
          const int64_t n = n0 + e % 16;
          const float s = b < blocks && n < N ? block_absmax(w, dynamic, n * blocks + b) : 0.f;
          float2& slot2 = scales[warp][(e / 16) * 8 + e % 8];
          if (e % 16 < 8) slot2.x = s;
          else slot2.y = s;
        }
        __syncwarp();
        if (!waited) {
          wait_for_previous_kernel();
          waited = true;
        }
#pragma unroll
        for (int i = 0; i < kChunk; ++i) {
          if (c0 + i >= blocks) break;
          uint4 lo = make_uint4(0, 0, 0, 0), hi = lo;
          if (g < M) {
            lo = __ldg(reinterpret_cast<const uint4*>(xs + (c0 + i) * 64));
            hi = __ldg(reinterpret_cast<const uint4*>(xs + (c0 + i) * 64 + 8));
          }
          const uint2 r0 = codes[i][0], r1 = codes[i][1];
          float d[4] = {0.f, 0.f, 0.f, 0.f};
          {
            const uint32_t a[4] = {pair(r0.x, 0), pair(r1.x, 0), pair(r0.x, 1), pair(r1.x, 1)};
            mma_16816<T>(d, a, lo.x, lo.y);
          }
          {
            const uint32_t a[4] = {pair(r0.x, 2), pair(r1.x, 2), pair(r0.x, 3), pair(r1.x, 3)};
            mma_16816<T>(d, a, lo.z, lo.w);
          }
          {
            const uint32_t a[4] = {pair(r0.y, 0), pair(r1.y, 0), pair(r0.y, 1), pair(r1.y, 1)};
            mma_16816<T>(d, a, hi.x, hi.y);
          }
          {
            const uint32_t a[4] = {pair(r0.y, 2), pair(r1.y, 2), pair(r0.y, 3), pair(r1.y, 3)};
            mma_16816<T>(d, a, hi.z, hi.w);
          }
          const float2 s = scales[warp][i * 8 + g];
          acc[0] = fmaf(s.x, d[0], acc[0]);
          acc[1] = fmaf(s.x, d[1], acc[1]);
          acc[2] = fmaf(s.y, d[2], acc[2]);
          acc[3] = fmaf(s.y, d[3], acc[3]);
        }
        __syncwarp();  // the next chunk rewrites the scales
      }
    }
    if (!waited) {
      wait_for_previous_kernel();
      waited = true;
    }
    if (2 * t < M) {
      sums[warp][g][2 * t] = acc[0];
      sums[warp][g + 8][2 * t] = acc[2];
    }
    if (2 * t + 1 < M) {
      sums[warp][g][2 * t + 1] = acc[1];
      sums[warp][g + 8][2 * t + 1] = acc[3];
    }
    __syncthreads();
    for (int e = tid; e < at_once * 128; e += kGemvThreads) {  // the tile's warps' sums, in a fixed order
      const int s = e / 128, r = e / 8 % 16, m = e % 8;
      const int64_t n = (turn * at_once + s) * 16 + r;
      if (m >= M || n >= N) continue;
      float v = 0.f;
      for (int p = 0; p < per_tile; ++p) v += sums[s * per_tile + p][r][m];
      y[m * N + n] = from_float<T>(bias != nullptr ? v + to_float(bias[n]) : v);
    }
    __syncthreads();
  }
}

int sm_count() {
  static const int sms = [] {
    int device = 0, count = 0;
    cudaGetDevice(&device);
    cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device);
    return std::max(count, 1);
  }();
  return sms;
}

template <typename T, int kChunk>
cudaError_t gemv_launch(const NF4Args& w, int M, int64_t N, int K, const T* x, const T* bias, T* y, int64_t turns,
                        cudaStream_t stream) {
  static const int per_sm = [] {
    int n = 0;
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, nf4_gemv_kernel<T, kChunk>, kGemvThreads, 0);
    return std::max(n, 1);
  }();
  const int64_t grid = std::min<int64_t>(turns, int64_t(sm_count()) * per_sm);
  return launch_dependent(nf4_gemv_kernel<T, kChunk>, dim3(unsigned(grid)), dim3(kGemvThreads), 0, stream, w, M, N, K,
                          x, bias, y);
}

// The longest chunk (the most codes a lane has in flight), no longer than a row, whose turns are as
// many as chunk one's or reach every SM: a longer chunk can give a tile fewer warps and the weight fewer
// turns, which leaves SMs idle only while the turns are fewer than the SMs. Asking that the turns reach
// every SM instead gave Llama-3.2-1B's down_proj (2048 x 8192: 128 turns at any chunk) chunks of one,
// 16 bytes in flight a lane; this choice took the 112 products of its decode step from 0.673 to 0.551
// ms on an H100.
template <typename T>
cudaError_t gemv_as(const NF4Args& w, int M, int64_t N, int K, const void* x, const void* bias, void* y,
                    cudaStream_t stream) {
  const auto* xs = static_cast<const T*>(x);
  const auto* bs = static_cast<const T*>(bias);
  auto* ys = static_cast<T*>(y);
  const int64_t blocks = K / 64, tiles = (N + 15) / 16;
  const auto turns = [&](int chunk) {
    const int64_t per_tile = std::min<int64_t>(kGemvWarps, (blocks + chunk - 1) / chunk);
    const int64_t at_once = kGemvWarps / per_tile;
    return (tiles + at_once - 1) / at_once;
  };
  const int64_t spread = std::min<int64_t>(sm_count(), turns(1));
  if (blocks >= 4 && turns(4) >= spread) return gemv_launch<T, 4>(w, M, N, K, xs, bs, ys, turns(4), stream);
  if (blocks >= 2 && turns(2) >= spread) return gemv_launch<T, 2>(w, M, N, K, xs, bs, ys, turns(2), stream);
  return gemv_launch<T, 1>(w, M, N, K, xs, bs, ys, turns(1), stream);
}

}  // namespace

template <typename T>
cudaError_t dequantize_as(const NF4Args& w, void* out, cudaStream_t stream) {
  const int64_t threads = (w.numel + 15) / 16;
  nf4_dequantize_kernel<T><<<(threads + 255) / 256, 256, 0, stream>>>(w, static_cast<T*>(out));
  return cudaGetLastError();
}

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

bool nf4_gemv_fits(int64_t M, int64_t K, DType dtype) {
  return M >= 1 && M <= kNF4GemvMaxRows && K > 0 && K % 64 == 0 && K <= (int64_t(1) << 30) && dtype != DType::kFloat32;
}

cudaError_t launch_nf4_gemv(const NF4Args& w, int64_t M, int64_t N, int64_t K, DType dtype, const void* x,
                            const void* bias, void* y, cudaStream_t stream) {
  if (!nf4_gemv_fits(M, K, dtype) || N <= 0 || !is_aligned(x, 16) || !is_aligned(w.packed, 16))
    return cudaErrorInvalidValue;
  if (dtype == DType::kBFloat16) return gemv_as<__nv_bfloat16>(w, int(M), N, int(K), x, bias, y, stream);
  return gemv_as<__half>(w, int(M), N, int(K), x, bias, y, stream);
}

}  // namespace llmtrain::kernels
