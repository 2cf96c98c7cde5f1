// Forward: a thread per pack of one token's row. Backward: dwpe a thread per (position, pack); dwte a
// block per tile of sorted positions, its threads spread over the row's packs, each walking the tile's
// positions in order and writing a run's sum when the run ends: straight into dwte when the run is a
// whole id, else into the tile's head (a run that began in an earlier tile) or tail (one that goes on
// into the next) scratch row. The border launch then finishes each id that crosses tiles, from the tile
// where it begins: its tail plus the following tiles' heads, in order.
#include <algorithm>
#include <type_traits>

#include "common/common.cuh"
#include "embedding.cuh"

namespace llmtrain::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kTile = 32;

__device__ __forceinline__ void record_bad(BadId* bad, int64_t tag, int64_t position, int64_t value) {
  if (bad == nullptr) return;
  if (atomicCAS(reinterpret_cast<unsigned long long*>(&bad->found), 0ull, 1ull) == 0ull) {
    bad->tag = tag;
    bad->position = position;
    bad->value = value;
  }
}

template <typename T, int P>
__global__ void __launch_bounds__(kThreads)
    embedding_fwd_kernel(const int64_t* __restrict__ idx, const T* __restrict__ wte, const T* __restrict__ wpe,
                         const int64_t* __restrict__ start, int64_t positions, int64_t N, int64_t S, int64_t C,
                         int64_t num_ids, T* __restrict__ out, BadId* bad, int64_t tag) {
  const int64_t per_row = C / P;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= N * per_row) return;
  const int64_t n = i / per_row, c = (i % per_row) * P;
  const int64_t id = idx[n], at = (start ? start[n / S] : 0) + n % S;
  float o[P];
  if (at < 0 || at >= positions) {  // the caller's offsets are wrong: NaN, never a read outside wpe
#pragma unroll
    for (int k = 0; k < P; ++k) o[k] = NAN;
  } else if (id < 0 || id >= num_ids) {
#pragma unroll
    for (int k = 0; k < P; ++k) o[k] = NAN;
    if (c == 0) record_bad(bad, tag, n, id);
  } else {
    float a[P], b[P];
    load_floats<P>(wte + id * C + c, a);
    load_floats<P>(wpe + at * C + c, b);
#pragma unroll
    for (int k = 0; k < P; ++k) o[k] = a[k] + b[k];
  }
  store_floats<P>(out + n * C + c, o);
}

__global__ void __launch_bounds__(kThreads)
    check_ids_kernel(const int64_t* __restrict__ ids, int64_t n, int64_t num_ids, bool allow_ignore,
                     int64_t ignore_index, BadId* bad, int64_t tag) {
  for (int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x; i < n; i += int64_t(gridDim.x) * kThreads) {
    const int64_t v = ids[i];
    if ((v < 0 || v >= num_ids) && !(allow_ignore && v == ignore_index)) record_bad(bad, tag, i, v);
  }
}

template <typename T, int P>
__global__ void __launch_bounds__(kThreads)
    embedding_bwd_wpe_kernel(const T* __restrict__ dout, int64_t B, int64_t S, int64_t C, T* __restrict__ dwpe) {
  const int64_t per_row = C / P;
  const int64_t i = int64_t(blockIdx.x) * kThreads + threadIdx.x;
  if (i >= S * per_row) return;
  const int64_t t = i / per_row, c = (i % per_row) * P;
  float acc[P] = {};
  for (int64_t b = 0; b < B; ++b) {
    float v[P];
    load_floats<P>(dout + (b * S + t) * C + c, v);
#pragma unroll
    for (int k = 0; k < P; ++k) acc[k] += v[k];
  }
  store_floats<P>(dwpe + t * C + c, acc);
}

template <typename T, int P>
__global__ void __launch_bounds__(kThreads)
    embedding_bwd_tile_kernel(const T* __restrict__ dout, const int64_t* __restrict__ sorted,
                              const int64_t* __restrict__ order, int64_t N, int64_t C, int64_t rows,
                              float* __restrict__ head, float* __restrict__ tail, T* __restrict__ dwte) {
  __shared__ int64_t ids[kTile], src[kTile];
  const int64_t tile = blockIdx.x, s = tile * kTile, e = min(s + kTile, N);
  const int len = int(e - s);
  for (int i = threadIdx.x; i < len; i += blockDim.x) {
    ids[i] = sorted[s + i];
    src[i] = order[s + i];
  }
  __syncthreads();
  const bool has_before = s > 0, has_after = e < N;
  const int64_t before = has_before ? sorted[s - 1] : 0, after = has_after ? sorted[e] : 0;
  for (int64_t c = int64_t(threadIdx.x) * P; c < C; c += int64_t(blockDim.x) * P) {
    float acc[P] = {};
    int start = 0;
    for (int i = 0; i < len; ++i) {
      float v[P];
      load_floats<P>(dout + src[i] * C + c, v);
#pragma unroll
      for (int k = 0; k < P; ++k) acc[k] += v[k];
      if (i + 1 < len && ids[i + 1] == ids[i]) continue;
      const int64_t id = ids[i];
      const bool cont_prev = start == 0 && has_before && before == id;
      const bool cont_next = i + 1 == len && has_after && after == id;
      if (id >= 0 && id < rows) {
        if (!cont_prev && !cont_next) store_floats<P>(dwte + id * C + c, acc);
        else store_floats<P>((cont_prev ? head : tail) + tile * C + c, acc);
      }
#pragma unroll
      for (int k = 0; k < P; ++k) acc[k] = 0.f;
      start = i + 1;
    }
  }
}

template <typename T, int P>
__global__ void __launch_bounds__(kThreads)
    embedding_bwd_border_kernel(const int64_t* __restrict__ sorted, int64_t N, int64_t C, int64_t rows,
                                const float* __restrict__ head, const float* __restrict__ tail, T* __restrict__ dwte) {
  const int64_t tile = blockIdx.x, s = tile * kTile, e = min(s + kTile, N);
  const int64_t id = sorted[e - 1];
  if (e >= N || sorted[e] != id) return;                        // the tile's last run ends inside it
  if (sorted[s] == id && s > 0 && sorted[s - 1] == id) return;  // or it began in an earlier tile
  if (id < 0 || id >= rows) return;
  for (int64_t c = int64_t(threadIdx.x) * P; c < C; c += int64_t(blockDim.x) * P) {
    float acc[P];
    load_floats<P>(tail + tile * C + c, acc);
    for (int64_t u = tile + 1;; ++u) {
      float v[P];
      load_floats<P>(head + u * C + c, v);
#pragma unroll
      for (int k = 0; k < P; ++k) acc[k] += v[k];
      const int64_t eu = min((u + 1) * kTile, N);
      if (eu >= N || sorted[eu] != id) break;  // tile u was all this id only if it goes on past it
    }
    store_floats<P>(dwte + id * C + c, acc);
  }
}

// Calls f(T*, Int<P>) with P = 16 bytes of T when C is a whole number of packs and every pointer is
// 16-byte aligned, else P = 1.
template <int V>
using Int = std::integral_constant<int, V>;

template <typename F>
cudaError_t dispatch(DType dtype, int64_t C, std::initializer_list<const void*> ptrs, F&& f) {
  bool aligned = true;
  for (const void* p : ptrs) aligned = aligned && is_aligned(p, 16);
  const auto go = [&](auto* t) {
    constexpr int P = 16 / int(sizeof(*t));
    if (aligned && C % P == 0) f(t, Int<P>{});
    else f(t, Int<1>{});
  };
  with_element_type(dtype, go);
  return cudaGetLastError();
}

int64_t blocks_for(int64_t threads) { return (threads + kThreads - 1) / kThreads; }

}  // namespace

cudaError_t launch_embedding_fwd(const int64_t* idx, const void* wte, const void* wpe, const int64_t* start,
                                 int64_t positions, DType dtype, int64_t N, int64_t T, int64_t C, int64_t num_ids,
                                 void* out, BadId* bad, int64_t tag, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  if (T < 1 || C < 1) return cudaErrorInvalidValue;
  return dispatch(dtype, C, {wte, wpe, out}, [&](auto* t, auto p) {
    using E = std::remove_pointer_t<decltype(t)>;
    constexpr int P = decltype(p)::value;
    embedding_fwd_kernel<E, P><<<blocks_for(N * (C / P)), kThreads, 0, stream>>>(
        idx, static_cast<const E*>(wte), static_cast<const E*>(wpe), start, positions, N, T, C, num_ids,
        static_cast<E*>(out), bad, tag);
  });
}

cudaError_t launch_check_ids(const int64_t* ids, int64_t n, int64_t num_ids, bool allow_ignore, int64_t ignore_index,
                             BadId* bad, int64_t tag, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int64_t grid = std::min<int64_t>(blocks_for(n), 1024);
  check_ids_kernel<<<grid, kThreads, 0, stream>>>(ids, n, num_ids, allow_ignore, ignore_index, bad, tag);
  return cudaGetLastError();
}

int64_t embedding_bwd_tiles(int64_t N) { return (N + kTile - 1) / kTile; }

cudaError_t launch_embedding_bwd(const void* dout, const int64_t* sorted_ids, const int64_t* order, DType dtype,
                                 int64_t N, int64_t T, int64_t C, int64_t rows, float* head, float* tail, void* dwte,
                                 void* dwpe, cudaStream_t stream) {
  if (N == 0) return cudaSuccess;
  if (T < 1 || C < 1 || N % T != 0) return cudaErrorInvalidValue;
  return dispatch(dtype, C, {dout, head, tail, dwte, dwpe}, [&](auto* t, auto p) {
    using E = std::remove_pointer_t<decltype(t)>;
    constexpr int P = decltype(p)::value;
    const E* d = static_cast<const E*>(dout);
    embedding_bwd_wpe_kernel<E, P>
        <<<blocks_for(T * (C / P)), kThreads, 0, stream>>>(d, N / T, T, C, static_cast<E*>(dwpe));
    // Threads over the row's packs, whole warps, at most kThreads.
    const int threads = int(std::min<int64_t>(kThreads, (C / P + 31) / 32 * 32));
    const int64_t tiles = embedding_bwd_tiles(N);
    embedding_bwd_tile_kernel<E, P>
        <<<tiles, threads, 0, stream>>>(d, sorted_ids, order, N, C, rows, head, tail, static_cast<E*>(dwte));
    embedding_bwd_border_kernel<E, P>
        <<<tiles, threads, 0, stream>>>(sorted_ids, N, C, rows, head, tail, static_cast<E*>(dwte));
  });
}

}  // namespace llmtrain::kernels
