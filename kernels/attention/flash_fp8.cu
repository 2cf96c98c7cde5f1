// The fp8 forward's operands (FlashFp8 in flash.cuh): a block per (tensor, b, head) finds the head's
// largest magnitude, then writes its e4m3 codes under the scale that takes it to 448. q and k keep their
// layout; v goes through a shared tile of 64 keys and is written transposed, each d's row of keys in
// P's register order (flash.cuh), four codes a 32-bit store.
#include <cuda_fp8.h>

#include "../common/common.cuh"
#include "flash.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kThreads = 256, kTileKeys = 64;

// vt's row length: whole tiles of the forward kernel's 128 keys.
__host__ __device__ __forceinline__ int64_t padded_keys(int64_t seqlen) { return (seqlen + 127) / 128 * 128; }
constexpr float kE4M3Max = 448.f;

__device__ __forceinline__ uint16_t two_codes(float a, float b) {
  return __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
}

// Which key of its 16 slot s (0..15) of vt's row holds: slot 4t + u takes key 2t + (u & 1) + 8 (u >> 1).
__device__ __forceinline__ int key_of_slot(int s) { return 2 * (s / 4) + (s & 1) + 8 * ((s % 4) >> 1); }

template <int kD>
__global__ void __launch_bounds__(kThreads) flash_fp8_quantize_kernel(FlashArgs a, FlashFp8 out) {
  __shared__ float scratch[32];
  __shared__ uint8_t tile[kTileKeys][kD + 4];  // v's codes of 64 keys, rows padded against bank conflicts
  const int64_t T = a.seqlen, H = a.heads, KV = a.kv_heads;
  // Blocks: B H of q, then B KV of k, then B KV of v.
  int64_t i = blockIdx.x;
  const int which = i < a.batch * H ? 0 : i < a.batch * (H + KV) ? 1 : 2;
  i -= which == 0 ? 0 : which == 1 ? a.batch * H : a.batch * (H + KV);
  const int64_t heads = which == 0 ? H : KV, b = i / heads, head = i % heads;
  const FlashTensor& in = which == 0 ? a.q : which == 1 ? a.k : a.v;
  const auto* x = static_cast<const __nv_bfloat16*>(in.data) + b * in.batch_stride + head * in.head_stride;
  constexpr int kPacks = kD / 8;  // 16-byte packs a row
  const int64_t packs = T * kPacks;

  float most = 0.f;
  for (int64_t p = threadIdx.x; p < packs; p += kThreads) {
    float v[8];
    load_floats<8>(x + (p / kPacks) * in.row_stride + (p % kPacks) * 8, v);
#pragma unroll
    for (int e = 0; e < 8; ++e) most = fmaxf(most, fabsf(v[e]));
  }
  most = block_max(most, scratch);
  // A head of zeros (or too small for a finite scale) keeps scale 1: its codes are zeros either way.
  const float scale = most > 0.f && kE4M3Max / most < 3.0e38f ? kE4M3Max / most : 1.f;
  if (threadIdx.x == 0) {
    float* descale = which == 0 ? out.q_descale : which == 1 ? out.k_descale : out.v_descale;
    descale[i] = 1.f / scale;
  }

  if (which < 2) {
    auto* codes = static_cast<uint8_t*>(which == 0 ? out.q : out.k) + i * T * kD;
    for (int64_t p = threadIdx.x; p < packs; p += kThreads) {
      float v[8];
      load_floats<8>(x + (p / kPacks) * in.row_stride + (p % kPacks) * 8, v);
      uint16_t c[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) c[e] = two_codes(v[2 * e] * scale, v[2 * e + 1] * scale);
      *reinterpret_cast<uint2*>(codes + p * 8) =
          make_uint2(uint32_t(c[0]) | uint32_t(c[1]) << 16, uint32_t(c[2]) | uint32_t(c[3]) << 16);
    }
    return;
  }
  const int64_t keys = padded_keys(T);
  auto* vt = static_cast<uint8_t*>(out.vt) + i * kD * keys;
  for (int64_t key0 = 0; key0 < keys; key0 += kTileKeys) {
    for (int p = threadIdx.x; p < kTileKeys * kPacks; p += kThreads) {  // the tile's keys, as rows
      const int r = p / kPacks, col = (p % kPacks) * 8;
      float v[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};  // keys past T: zeros
      if (key0 + r < T) load_floats<8>(x + (key0 + r) * in.row_stride + col, v);
#pragma unroll
      for (int e = 0; e < 4; ++e)
        *reinterpret_cast<uint16_t*>(&tile[r][col + 2 * e]) = two_codes(v[2 * e] * scale, v[2 * e + 1] * scale);
    }
    __syncthreads();
    for (int p = threadIdx.x; p < kD * (kTileKeys / 4); p += kThreads) {  // four slots of one d's row
      const int d = p / (kTileKeys / 4), slot0 = (p % (kTileKeys / 4)) * 4, base = slot0 / 16 * 16;
      uint32_t word = 0;
#pragma unroll
      for (int u = 0; u < 4; ++u) word |= uint32_t(tile[base + key_of_slot(slot0 % 16 + u)][d]) << (8 * u);
      *reinterpret_cast<uint32_t*>(vt + d * keys + key0 + slot0) = word;
    }
    __syncthreads();
  }
}

}  // namespace

int64_t flash_fp8_keys(int64_t seqlen) { return padded_keys(seqlen); }

cudaError_t launch_flash_fp8_quantize(const FlashArgs& a, const FlashFp8& codes, cudaStream_t stream) {
  if (!flash_fits(a) || codes.q == nullptr || codes.k == nullptr || codes.vt == nullptr || codes.q_descale == nullptr ||
      codes.k_descale == nullptr || codes.v_descale == nullptr)
    return cudaErrorInvalidValue;
  if (a.batch == 0 || a.heads == 0 || a.seqlen == 0) return cudaSuccess;
  const dim3 grid(unsigned(a.batch * (a.heads + 2 * a.kv_heads)));
  if (a.head_dim == 64) flash_fp8_quantize_kernel<64><<<grid, kThreads, 0, stream>>>(a, codes);
  else flash_fp8_quantize_kernel<128><<<grid, kThreads, 0, stream>>>(a, codes);
  return cudaGetLastError();
}

}  // namespace llmtrain::kernels
