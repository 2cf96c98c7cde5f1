// A block of 8 warps per (head, row), launched as a programmatic dependent launch (common.cuh) so that its
// start overlaps the end of the projection before it. A head's row of D elements is L lanes' 16-byte packs,
// so a warp holds 32 / L positions at once and the block 8 * 32 / L; each thread walks its positions four at
// a time (their loads issued together, the first four before the block waits for the projection), keeping a
// running maximum, sum and weighted value sum for its pack. The new token's key and value are read from the
// projection, not from the cache the block writes them to, so no thread reads what another writes. The
// partial softmaxes are merged across a warp's positions by shuffles, then across warps in a fixed order
// through shared memory.
#include <cmath>
#include <type_traits>

#include "common/common.cuh"
#include "decode_attention.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kRound = 4;  // positions a thread has in flight at once

// exp2(m - m_new), the weight of a partial result whose maximum was m; none (0) for an empty one.
__device__ __forceinline__ float rescale(float m, float m_new) { return m == -INFINITY ? 0.f : exp2f(m - m_new); }

template <typename T, int L, bool kRotate>  // kRotate: inv_freq given (GPT-2 compiles without the rotation)
__global__ void __launch_bounds__(kThreads)
    decode_attention_kernel(const T* __restrict__ qkv, int64_t qkv_stride, T* k_cache, T* v_cache,
                            const int64_t* __restrict__ pos, int H, int KV, int64_t S, int64_t window, float scale_log2,
                            const float* __restrict__ inv_freq, T* __restrict__ out) {
  constexpr int P = 16 / sizeof(T), D = L * P, G = 32 / L, kStep = kWarps * G;
  const int h = blockIdx.x, kv = h / (H / KV);  // the key/value head this query head reads
  const int64_t b = blockIdx.y, C = int64_t(H) * D;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, sub = lane % L, slot = lane / L;
  const T* q_row = qkv + b * qkv_stride + h * D;
  const T* k_new = qkv + b * qkv_stride + C + int64_t(kv) * D;  // the row's new key and value of head kv
  const T* v_new = k_new + int64_t(KV) * D;
  __shared__ __align__(16) T rotated[2][D];  // the query and the new key, rotated
  T* o = out + b * C + h * D;
  let_dependents_start();  // the output projection after may fetch its weights meanwhile
  // Before the wait: pos and the cached positions before it were written before this chain of launches
  // (launch_decode_attention's contract), so the first round of keys and values is in flight while the
  // projection before finishes. The new token's key and value come from that projection, after the wait.
  const int64_t p = pos[b], head = (b * KV + kv) * S * D;
  const T* K = k_cache + head;
  const T* V = v_cache + head;
  const int64_t first = window > 0 && p >= window ? p - window + 1 : 0;  // a sliding window's oldest key
  Vec<T> kb[kRound], vb[kRound];  // a round's packs: positions base + slot + j * kStep
  const auto fetch = [&](int64_t base) {
#pragma unroll
    for (int j = 0; j < kRound; ++j) {
      const int64_t t = base + slot + int64_t(j) * kStep;
      if (t < p) {
        kb[j] = *reinterpret_cast<const Vec<T>*>(K + t * D + sub * P);
        vb[j] = *reinterpret_cast<const Vec<T>*>(V + t * D + sub * P);
      }
    }
  };
  const bool in_range = p >= 0 && p < S;
  if (in_range) fetch(first + int64_t(warp) * G);
  wait_for_previous_kernel();
  if (!in_range) {
    if (threadIdx.x < L) {
      float nan[P];
#pragma unroll
      for (int i = 0; i < P; ++i) nan[i] = NAN;
      store_floats<P>(o + threadIdx.x * P, nan);
    }
    return;
  }
  if constexpr (kRotate) {
    for (int i = threadIdx.x; i < D / 2; i += kThreads) {
      float sn, cs;
      sincosf(float(p) * inv_freq[i], &sn, &cs);
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        const T* x = j == 0 ? q_row : k_new;
        const float x1 = to_float(x[i]), x2 = to_float(x[i + D / 2]);
        rotated[j][i] = from_float<T>(x1 * cs - x2 * sn);
        rotated[j][i + D / 2] = from_float<T>(x2 * cs + x1 * sn);
      }
    }
    __syncthreads();
    q_row = rotated[0];
    k_new = rotated[1];
  }
  if (h % (H / KV) == 0 && threadIdx.x < L) {  // one query head of the group writes the cache
    const int c = threadIdx.x * P;
    *reinterpret_cast<Vec<T>*>(k_cache + head + p * D + c) = *reinterpret_cast<const Vec<T>*>(k_new + c);
    *reinterpret_cast<Vec<T>*>(v_cache + head + p * D + c) = *reinterpret_cast<const Vec<T>*>(v_new + c);
  }

  float q[P];
  load_floats<P>(q_row + sub * P, q);
#pragma unroll
  for (int i = 0; i < P; ++i) q[i] *= scale_log2;  // scores in log2 units, for exp2
  float m = -INFINITY, l = 0.f, acc[P] = {};
  // base is the same for the whole warp, so every lane runs every iteration (the shuffles need them).
  for (int64_t base = first + int64_t(warp) * G; base <= p; base += kRound * kStep) {
    if (base != first + int64_t(warp) * G) fetch(base);
    float sc[kRound];
#pragma unroll
    for (int j = 0; j < kRound; ++j) {
      const int64_t t = base + slot + int64_t(j) * kStep;
      if (t == p) kb[j] = *reinterpret_cast<const Vec<T>*>(k_new + sub * P);
      sc[j] = 0.f;
      if (t <= p)
#pragma unroll
        for (int i = 0; i < P; ++i) sc[j] += q[i] * to_float(kb[j].v[i]);
    }
#pragma unroll
    for (int off = L / 2; off > 0; off >>= 1)  // within the L lanes of a position
#pragma unroll
      for (int j = 0; j < kRound; ++j) sc[j] += __shfl_xor_sync(0xffffffffu, sc[j], off);
#pragma unroll
    for (int j = 0; j < kRound; ++j) {
      const int64_t t = base + slot + int64_t(j) * kStep;
      if (t > p) continue;
      if (t == p) vb[j] = *reinterpret_cast<const Vec<T>*>(v_new + sub * P);
      const float m_new = fmaxf(m, sc[j]), c = exp2f(m - m_new), e = exp2f(sc[j] - m_new);
      l = l * c + e;
#pragma unroll
      for (int i = 0; i < P; ++i) acc[i] = acc[i] * c + e * to_float(vb[j].v[i]);
      m = m_new;
    }
  }
  // Merge the warp's positions: lanes of one pack (equal sub) across slots.
#pragma unroll
  for (int off = L; off < 32; off <<= 1) {
    const float m_o = __shfl_xor_sync(0xffffffffu, m, off), l_o = __shfl_xor_sync(0xffffffffu, l, off);
    const float m_new = fmaxf(m, m_o), c = rescale(m, m_new), c_o = rescale(m_o, m_new);
    l = l * c + l_o * c_o;
#pragma unroll
    for (int i = 0; i < P; ++i) acc[i] = acc[i] * c + __shfl_xor_sync(0xffffffffu, acc[i], off) * c_o;
    m = m_new;
  }
  __shared__ float s_m[kWarps], s_l[kWarps], s_acc[kWarps][L][P];
  if (slot == 0) {
    if (sub == 0) {
      s_m[warp] = m;
      s_l[warp] = l;
    }
#pragma unroll
    for (int i = 0; i < P; ++i) s_acc[warp][sub][i] = acc[i];
  }
  __syncthreads();
  if (threadIdx.x >= L) return;
  float m_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, s_m[w]);
  float l_all = 0.f, r[P] = {};
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    const float c = rescale(s_m[w], m_all);
    l_all += s_l[w] * c;
#pragma unroll
    for (int i = 0; i < P; ++i) r[i] += s_acc[w][threadIdx.x][i] * c;
  }
#pragma unroll
  for (int i = 0; i < P; ++i) r[i] /= l_all;
  store_floats<P>(o + threadIdx.x * P, r);
}

}  // namespace

bool decode_attention_fits(DType dtype, int64_t D) {
  const int64_t P = pack_elements(dtype);
  if (D <= 0 || D % P != 0) return false;
  const int64_t L = D / P;
  return L == 4 || L == 8 || L == 16 || L == 32;
}

cudaError_t launch_decode_attention(const void* qkv, int64_t qkv_stride, void* k_cache, void* v_cache,
                                    const int64_t* pos, DType dtype, int64_t B, int64_t H, int64_t KV, int64_t S,
                                    int64_t D, int64_t window, const float* inv_freq, void* out, cudaStream_t stream) {
  if (B == 0) return cudaSuccess;
  const int64_t bytes = dtype_bytes(dtype);
  if (H < 1 || KV < 1 || H % KV != 0 || window < 0 || S < 1 || B > 65535 || !decode_attention_fits(dtype, D) ||
      (qkv_stride * bytes) % 16 != 0 || !is_aligned(qkv, 16) || !is_aligned(k_cache, 16) || !is_aligned(v_cache, 16) ||
      !is_aligned(out, 16))
    return cudaErrorInvalidValue;
  const float scale_log2 = float(1.4426950408889634 / std::sqrt(double(D)));
  const dim3 grid{static_cast<unsigned>(H), static_cast<unsigned>(B)};
  cudaError_t launched = cudaSuccess;
  with_element_type(dtype, [&](auto* t) {
    using E = std::remove_pointer_t<decltype(t)>;
    const auto go = [&](auto kernel) {
      launched = launch_dependent(kernel, grid, dim3(kThreads), 0, stream, static_cast<const E*>(qkv), qkv_stride,
                                  static_cast<E*>(k_cache), static_cast<E*>(v_cache), pos, int(H), int(KV), S, window,
                                  scale_log2, inv_freq, static_cast<E*>(out));
    };
    const auto by_width = [&](auto rotate) {
      constexpr bool kR = decltype(rotate)::value;
      switch (D / pack_elements(dtype)) {
        case 4: go(decode_attention_kernel<E, 4, kR>); break;
        case 8: go(decode_attention_kernel<E, 8, kR>); break;
        case 16: go(decode_attention_kernel<E, 16, kR>); break;
        default: go(decode_attention_kernel<E, 32, kR>); break;
      }
    };
    if (inv_freq != nullptr) by_width(std::true_type{});
    else by_width(std::false_type{});
  });
  return launched != cudaSuccess ? launched : cudaGetLastError();
}

}  // namespace llmtrain::kernels
