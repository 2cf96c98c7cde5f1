// Blocks of 4 warps. The kernel is launched as a programmatic dependent launch: its blocks may start
// while the kernel before it on the stream still runs (each block lets the next kernel start as soon as
// it begins) and, for a small weight, fetch the rows of their first turn into L2 before they wait for the
// kernel before to finish; in a chain of small products (GPT-2's decode step) the next layer's weights
// load while this one computes. A weight above an eighth of L2 skips that: its prefetch evicts what the
// running launch still reads (a Llama-3.2-1B decode step, whose products are all above, ran 5-7% faster
// without it on an H100; GPT-2's the same). After the wait each block stages its input rows in shared memory as the
// dtype (warp m row m: x + delta, rounded as stored, then normalised in two passes over the staged row). Then each warp
// takes two weight rows at a time: lane l reads packs l, l + 32, ... of both, four packs of each row in flight, and
// keeps M x 2 float sums, added across the warp by shuffles at the end; one lane adds the bias and activation of each
// output. The grid is capped at the blocks the SMs hold at once (4 or 5 an SM: 91-118 registers a thread), so that a
// wide layer (the classifier) runs as one wave and pays the staging once a block. Weights of several parts (kMulti)
// find each row's part at the start of a turn; SwiGLU gives a warp one output's gate and up rows as its two.
#include <algorithm>
#include <type_traits>

#include "common/common.cuh"
#include "gemv.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 2;  // weight rows a warp takes at a time
constexpr int kUnroll = 4;       // packs of each row a lane has in flight
constexpr int64_t kStageBytes = 48 * 1024;

template <typename T>
struct Params {
  int M, K;
  int64_t N;  // the rows of the weight as read: the parts' rows together
  const T* x;
  const T* delta;
  T* sum;
  const T* ln_weight;
  const T* ln_bias;  // null with ln_weight: RMSNorm
  float eps;
  int parts;
  const T* w[kGemvMaxParts];
  const T* bias[kGemvMaxParts];
  int64_t n[kGemvMaxParts];
  GemvAct act;
  T* y;
  bool prefetch;  // the first turn's rows towards L2 before the wait
};

// Row v of the weight as the kernel reads it and its bias: the parts one after another, or for SwiGLU
// gate row v / 2 and up row v / 2 in turn, so that a warp's two rows are one output's gate and up.
// kMulti false: one part (GPT-2's products and the Llama family's single ones), no search.
template <bool kMulti, typename T>
__device__ __forceinline__ const T* weight_row(const Params<T>& p, int64_t v, const T** bias) {
  if constexpr (!kMulti) {
    *bias = p.bias[0] != nullptr ? p.bias[0] + v : nullptr;
    return p.w[0] + v * p.K;
  }
  int part = 0;
  if (p.act == GemvAct::kSwiGLU) {
    part = int(v & 1);
    v >>= 1;
  } else {
    while (part + 1 < p.parts && v >= p.n[part]) v -= p.n[part++];
  }
  *bias = p.bias[part] != nullptr ? p.bias[part] + v : nullptr;
  return p.w[part] + v * p.K;
}

template <typename T, int MT, bool kNorm, bool kMulti>
__global__ void __launch_bounds__(kThreads) gemv_kernel(const Params<T> p) {
  constexpr int P = 16 / sizeof(T), R = kRowsPerWarp;
  extern __shared__ __align__(16) unsigned char stage_bytes[];
  T* in = reinterpret_cast<T*>(stage_bytes);  // (M, K)
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, packs = p.K / P;
  const int64_t first = (int64_t(blockIdx.x) * kWarps + warp) * R, stride = int64_t(gridDim.x) * kWarps * R;

  let_dependents_start();
  for (int r = 0; p.prefetch && r < R; ++r)  // towards L2 while the kernel before finishes
    if (first + r < p.N) {
      const T* bias;
      const T* w = weight_row<kMulti>(p, first + r, &bias);
      for (int c = lane; c < packs; c += 32) asm volatile("prefetch.global.L2 [%0];" ::"l"(w + int64_t(c) * P));
    }
  wait_for_previous_kernel();  // nothing the kernels before wrote is read above, nor anything written

  if (warp < p.M) {
    const int64_t row = int64_t(warp) * p.K;
    T* s = in + row;
    float total = 0.f;
    for (int c = lane; c < packs; c += 32) {
      float v[P];
      load_floats<P>(p.x + row + c * P, v);
      if (p.delta != nullptr) {
        float d[P];
        load_floats<P>(p.delta + row + c * P, d);
#pragma unroll
        for (int i = 0; i < P; ++i) v[i] = to_float(from_float<T>(v[i] + d[i]));
        if (blockIdx.x == 0) store_floats<P>(p.sum + row + c * P, v);
      }
      store_floats<P>(s + c * P, v);
#pragma unroll
      for (int i = 0; i < P; ++i) total += v[i];
    }
    if constexpr (kNorm) {
      const bool rms = p.ln_bias == nullptr;  // RMSNorm: the squares' mean about zero, no bias
      const float mean = rms ? 0.f : warp_sum(total) / float(p.K);
      float sq = 0.f;
      for (int c = lane; c < packs; c += 32) {  // each lane rereads only the packs it wrote
        float v[P];
        load_floats<P>(s + c * P, v);
#pragma unroll
        for (int i = 0; i < P; ++i) sq += (v[i] - mean) * (v[i] - mean);
      }
      const float rstd = rsqrtf(warp_sum(sq) / float(p.K) + p.eps);
      for (int c = lane; c < packs; c += 32) {
        float v[P], g[P], b[P] = {};
        load_floats<P>(s + c * P, v);
        load_floats<P>(p.ln_weight + c * P, g);
        if (!rms) load_floats<P>(p.ln_bias + c * P, b);
#pragma unroll
        for (int i = 0; i < P; ++i) v[i] = (v[i] - mean) * rstd * g[i] + b[i];
        store_floats<P>(s + c * P, v);
      }
    }
  }
  __syncthreads();

  for (int64_t n0 = first; n0 < p.N; n0 += stride) {
    const T* w[R];
    const T* bias[R] = {};
#pragma unroll
    for (int r = 0; r < R; ++r) w[r] = n0 + r < p.N ? weight_row<kMulti>(p, n0 + r, &bias[r]) : nullptr;
    float acc[R][MT] = {};
    for (int c0 = 0; c0 < packs; c0 += 32 * kUnroll) {
      Vec<T> wv[kUnroll][R];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u)
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const int c = c0 + lane + 32 * u;
          // One weight's rows straight from p.w[0], not through w[]: GPT-2's decode-step products ran 6%
          // faster so (291 against 311 us on an H100), as fast as before the parts came in.
          if (c < packs && (kMulti ? w[r] != nullptr : n0 + r < p.N)) {
            wv[u][r] = *reinterpret_cast<const Vec<T>*>((kMulti ? w[r] : p.w[0] + (n0 + r) * p.K) + int64_t(c) * P);
          } else {
#pragma unroll
            for (int i = 0; i < P; ++i) wv[u][r].v[i] = from_float<T>(0.f);
          }
        }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int c = c0 + lane + 32 * u;
        if (c >= packs) continue;
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          if (m >= p.M) continue;
          float xv[P];
          load_floats<P>(in + int64_t(m) * p.K + c * P, xv);
#pragma unroll
          for (int r = 0; r < R; ++r)
#pragma unroll
            for (int i = 0; i < P; ++i) acc[r][m] += to_float(wv[u][r].v[i]) * xv[i];
        }
      }
    }
    float total[R][MT];
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
      for (int m = 0; m < MT; ++m) total[r][m] = warp_sum(acc[r][m]);
    // One lane writes each output: its bias and activation are that lane's alone.
    const auto biased = [&](int r, int m) { return total[r][m] + (bias[r] != nullptr ? to_float(*bias[r]) : 0.f); };
    if (kMulti && p.act == GemvAct::kSwiGLU) {  // rows n0, n0 + 1: output n0 / 2's gate and up (n0 is even)
      static_assert(R == 2, "SwiGLU pairs a warp's two rows");
#pragma unroll
      for (int m = 0; m < MT; ++m)
        if (lane == m && m < p.M && w[1] != nullptr) {
          const float g = biased(0, m);
          p.y[int64_t(m) * (p.N / 2) + n0 / 2] = from_float<T>(g / (1.f + __expf(-g)) * biased(1, m));
        }
    } else {
#pragma unroll
      for (int r = 0; r < R; ++r)
#pragma unroll
        for (int m = 0; m < MT; ++m) {
          const int64_t n = n0 + r;
          if (lane == r * MT + m && m < p.M && n < p.N) {
            float v = biased(r, m);
            if (p.act == GemvAct::kGelu) v = gelu<T>(v);
            p.y[int64_t(m) * p.N + n] = from_float<T>(v);
          }
        }
    }
  }
}

// The blocks of `kernel` the device holds at once with `stage` bytes of shared memory each.
template <typename Kernel>
int64_t resident_blocks(Kernel kernel, size_t stage) {
  int device = 0, sms = 0, per_sm = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, kThreads, stage) != cudaSuccess || per_sm < 1)
    return 132 * 4;
  return int64_t(sms) * per_sm;
}

int64_t l2_bytes() {
  int device = 0, bytes = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&bytes, cudaDevAttrL2CacheSize, device) != cudaSuccess)
    return 0;
  return bytes;
}

}  // namespace

bool gemv_fits(DType dtype, int64_t M, int64_t K) {
  const int64_t bytes = dtype_bytes(dtype);
  return M >= 1 && M <= kGemvMaxRows && K >= 1 && (K * bytes) % 16 == 0 && M * K * bytes <= kStageBytes;
}

cudaError_t launch_gemv(const GemvArgs& a, cudaStream_t stream) {
  const bool swiglu = a.act == GemvAct::kSwiGLU;
  if (a.parts < 1 || a.parts > kGemvMaxParts || (swiglu && (a.parts != 2 || a.n[0] != a.n[1])))
    return cudaErrorInvalidValue;
  int64_t N = 0;
  for (int i = 0; i < a.parts; ++i) {
    if (a.n[i] < 0 || a.w[i] == nullptr || !is_aligned(a.w[i], 16)) return cudaErrorInvalidValue;
    N += a.n[i];
  }
  if (N == 0) return cudaSuccess;
  const bool norm = a.ln_weight != nullptr;
  if (!gemv_fits(a.dtype, a.M, a.K) || a.x == nullptr || a.y == nullptr || (a.delta != nullptr && a.sum == nullptr))
    return cudaErrorInvalidValue;
  for (const void* q : {a.x, a.delta, static_cast<const void*>(a.sum), static_cast<const void*>(a.y)})
    if (!is_aligned(q, 16)) return cudaErrorInvalidValue;
  const int64_t turns = (N + kRowsPerWarp * kWarps - 1) / (kRowsPerWarp * kWarps);
  const size_t stage = static_cast<size_t>(a.M * a.K * dtype_bytes(a.dtype));
  cudaError_t launched = cudaSuccess;
  with_element_type(a.dtype, [&](auto* t) {
    using E = std::remove_pointer_t<decltype(t)>;
    Params<E> p{int(a.M),
                int(a.K),
                N,
                static_cast<const E*>(a.x),
                static_cast<const E*>(a.delta),
                static_cast<E*>(a.sum),
                static_cast<const E*>(a.ln_weight),
                static_cast<const E*>(a.ln_bias),
                a.eps,
                a.parts,
                {},
                {},
                {},
                a.act,
                static_cast<E*>(a.y),
                N * a.K * dtype_bytes(a.dtype) * 8 <= l2_bytes()};
    for (int i = 0; i < a.parts; ++i) {
      p.w[i] = static_cast<const E*>(a.w[i]);
      p.bias[i] = static_cast<const E*>(a.bias[i]);
      p.n[i] = a.n[i];
    }
    const auto go = [&](auto kernel) {
      const auto grid = static_cast<unsigned>(std::min(turns, resident_blocks(kernel, stage)));
      launched = launch_dependent(kernel, dim3(grid), dim3(kThreads), stage, stream, p);
    };
    const auto by_rows = [&](auto norm_v, auto multi_v) {
      constexpr bool kN = decltype(norm_v)::value, kM = decltype(multi_v)::value;
      if (a.M == 1) go(gemv_kernel<E, 1, kN, kM>);
      else if (a.M == 2) go(gemv_kernel<E, 2, kN, kM>);
      else go(gemv_kernel<E, 4, kN, kM>);
    };
    const bool multi = a.parts > 1 || swiglu;
    using Yes = std::true_type;
    using No = std::false_type;
    if (norm) multi ? by_rows(Yes{}, Yes{}) : by_rows(Yes{}, No{});
    else multi ? by_rows(No{}, Yes{}) : by_rows(No{}, No{});
  });
  return launched != cudaSuccess ? launched : cudaGetLastError();
}

}  // namespace llmtrain::kernels
