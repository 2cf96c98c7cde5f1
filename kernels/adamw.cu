// Block per chunk, 512 threads, strided loops: the tensors' sizes and alignments vary (biases of 768,
// matrices of 2.4M), and at 12-16 bytes read and 12-14 written per element the step is bound by memory
// bandwidth, so AdamW takes four elements a thread at a time in 16-byte loads where it can (more bytes
// in flight), element by element elsewhere.
#include "adamw.cuh"
#include "common/common.cuh"
#include "common/rounding.h"

namespace llmtrain::kernels {
namespace {

constexpr int kThreads = 512;

template <typename G>
__global__ void __launch_bounds__(kThreads)
    grad_sumsq_kernel(const AdamWTensor* __restrict__ tensors, const AdamWChunk* __restrict__ chunks,
                      float* __restrict__ partials) {
  __shared__ float scratch[32];
  const AdamWChunk c = chunks[blockIdx.x];
  const AdamWTensor t = tensors[c.tensor];
  const G* g = static_cast<const G*>(t.grad);
  const int64_t end = min(c.start + kAdamWChunk, t.numel);
  float s = 0.f;
  for (int64_t i = c.start + threadIdx.x; i < end; i += kThreads) {
    const float x = to_float(g[i]);
    s += x * x;
  }
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void __launch_bounds__(1024)
    grad_norm_finish_kernel(const float* __restrict__ partials, int64_t n, float inv_scale, float max_norm,
                            float* __restrict__ out) {
  __shared__ float scratch[32];
  float s = 0.f;
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += partials[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) {
    const float norm = sqrtf(s) * inv_scale;
    out[0] = norm;
    float factor = inv_scale;
    if (max_norm > 0.f && norm > max_norm) factor *= max_norm / (norm + 1e-6f);
    out[1] = isfinite(norm) ? factor : NAN;
  }
}

// The bf16 copy of master weight w, element i of tensor t.
template <bool Stochastic>
__device__ __forceinline__ __nv_bfloat16 to_param(float w, const AdamWTensor& t, int64_t i) {
  if constexpr (Stochastic) return __ushort_as_bfloat16(bf16_bits_stochastic(w, t.round_key, i));
  return __float2bfloat16_rn(w);
}

template <typename G, bool Stochastic>
__global__ void __launch_bounds__(kThreads)
    adamw_kernel(const AdamWTensor* __restrict__ tensors, const AdamWChunk* __restrict__ chunks, float lr, float beta1,
                 float beta2, float eps, float bc1, float bc2, const float* __restrict__ scale) {
  const float s = scale[0];
  if (!isfinite(s)) return;  // an inf/nan gradient: the step is skipped on the device
  const AdamWChunk c = chunks[blockIdx.x];
  const AdamWTensor t = tensors[c.tensor];
  const G* g = static_cast<const G*>(t.grad);
  __nv_bfloat16* param = static_cast<__nv_bfloat16*>(t.param);
  const int64_t end = min(c.start + kAdamWChunk, t.numel);
  const float decay = 1.f - lr * t.weight_decay, step_size = lr / bc1, root_bc2 = sqrtf(bc2);
  const auto update = [&](float grad, float& m, float& v, float& w) {
    grad *= s;
    m += (1.f - beta1) * (grad - m);
    v = beta2 * v + (1.f - beta2) * grad * grad;
    w = w * decay - step_size * m / (sqrtf(v) / root_bc2 + eps);
  };
  // Four elements a thread at a time in 16-byte float loads (chunks start at multiples of four), when
  // the tensors allow; the rest, one at a time.
  constexpr int V = 4;
  int64_t tail = c.start;
  if (is_aligned(t.master, 16) && is_aligned(t.exp_avg, 16) && is_aligned(t.exp_avg_sq, 16) &&
      is_aligned(g, V * sizeof(G)) && is_aligned(param, V * sizeof(__nv_bfloat16))) {
    for (int64_t i = c.start + V * threadIdx.x; i + V <= end; i += V * kThreads) {
      float w[V], m[V], v[V], gr[V];
      load_floats<V>(t.master + i, w);
      load_floats<V>(t.exp_avg + i, m);
      load_floats<V>(t.exp_avg_sq + i, v);
      load_floats<V>(g + i, gr);
#pragma unroll
      for (int k = 0; k < V; ++k) update(gr[k], m[k], v[k], w[k]);
      store_floats<V>(t.exp_avg + i, m);
      store_floats<V>(t.exp_avg_sq + i, v);
      store_floats<V>(t.master + i, w);
      if (param) {
        Pack<__nv_bfloat16, V> pk;
#pragma unroll
        for (int k = 0; k < V; ++k) pk.v[k] = to_param<Stochastic>(w[k], t, i + k);
        *reinterpret_cast<Pack<__nv_bfloat16, V>*>(param + i) = pk;
      }
    }
    tail = c.start + (end - c.start) / V * V;
  }
  for (int64_t i = tail + threadIdx.x; i < end; i += kThreads) {
    float m = t.exp_avg[i], v = t.exp_avg_sq[i], w = t.master[i];
    update(to_float(g[i]), m, v, w);
    t.exp_avg[i] = m;
    t.exp_avg_sq[i] = v;
    t.master[i] = w;
    if (param) param[i] = to_param<Stochastic>(w, t, i);
  }
}

// 8-bit moments: a warp per block of 256 values (each lane eight, 32 apart, so every load of the warp
// is one contiguous run), eight warps a CUDA block looping over the chunk's 256 blocks. The block's
// new absmaxes come from warp reductions; codes from a binary search over the map's midpoints in
// shared memory. The scaling follows the ATen reference (ops/adamw.cpp, tables.h): a full block times
// its absmax's reciprocal, a partial one divided by it, both clamped to [-1, 1].
constexpr int k8bitPerLane = kAdamW8bitBlock / 32;

__device__ __forceinline__ int nearest_code(const float* mids, float x) {
  int lo = 0, hi = 255;  // the number of midpoints below x
  while (lo < hi) {
    const int mid = (lo + hi) >> 1;
    if (mids[mid] < x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

__device__ __forceinline__ float scaled_for_code(float x, float absmax, bool full) {
  const float a = fmaxf(absmax, 1e-38f);
  return fminf(fmaxf(full ? __fmul_rn(x, __frcp_rn(a)) : __fdiv_rn(x, a), -1.f), 1.f);
}

template <typename G, bool Stochastic>
__global__ void __launch_bounds__(256)
    adamw8bit_kernel(const AdamW8bitTensor* __restrict__ tensors, const AdamWChunk* __restrict__ chunks,
                     AdamW8bitMaps maps, AdamW8bitStep h, const float* __restrict__ scale) {
  __shared__ float m_map[256], v_map[256], m_mids[256], v_mids[256];
  const float s = scale[0];
  if (!isfinite(s)) return;  // an inf/nan gradient: the step is skipped on the device
  m_map[threadIdx.x] = maps.m_map[threadIdx.x];
  v_map[threadIdx.x] = maps.v_map[threadIdx.x];
  if (threadIdx.x < 255) {
    m_mids[threadIdx.x] = maps.m_mids[threadIdx.x];
    v_mids[threadIdx.x] = maps.v_mids[threadIdx.x];
  }
  __syncthreads();
  const AdamWChunk c = chunks[blockIdx.x];
  const AdamW8bitTensor t = tensors[c.tensor];
  const G* g = static_cast<const G*>(t.grad);
  __nv_bfloat16* param = static_cast<__nv_bfloat16*>(t.param);
  const int64_t end = min(c.start + kAdamWChunk, t.numel);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int64_t b0 = c.start + int64_t(warp) * kAdamW8bitBlock; b0 < end; b0 += 8 * kAdamW8bitBlock) {
    const int64_t block = b0 / kAdamW8bitBlock;
    const float m_scale = t.m_absmax[block], v_scale = t.v_absmax[block];
    float m[k8bitPerLane], v[k8bitPerLane], m_max = 0.f, v_max = 0.f;
#pragma unroll
    for (int k = 0; k < k8bitPerLane; ++k) {
      const int64_t i = b0 + lane + 32 * k;
      m[k] = v[k] = 0.f;
      if (i >= end) continue;
      const float grad = to_float(g[i]) * s;
      float w = t.master[i];
      m[k] = __fmul_rn(m_map[t.m_codes[i]], m_scale);
      v[k] = __fmul_rn(v_map[t.v_codes[i]], v_scale);
      // The reference's order of operations (ATen's add with alpha is a fused multiply-add).
      w = __fmul_rn(w, t.decay);
      m[k] = __fmaf_rn(h.one_minus_beta1, grad, __fmul_rn(m[k], h.beta1));
      v[k] = __fadd_rn(__fmul_rn(v[k], h.beta2), __fmul_rn(__fmul_rn(h.one_minus_beta2, grad), grad));
      const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(v[k]), h.root_bc2), h.eps);
      w = __fadd_rn(w, __fmul_rn(-h.step_size, __fdiv_rn(m[k], denom)));
      t.master[i] = w;
      if (param) {
        if constexpr (Stochastic) param[i] = __ushort_as_bfloat16(bf16_bits_stochastic(w, t.round_key, i));
        else param[i] = __float2bfloat16_rn(w);
      }
      m_max = fmaxf(m_max, fabsf(m[k]));
      v_max = fmaxf(v_max, fabsf(v[k]));
    }
    m_max = warp_max(m_max);
    v_max = warp_max(v_max);
    const bool full = b0 + kAdamW8bitBlock <= end;
#pragma unroll
    for (int k = 0; k < k8bitPerLane; ++k) {
      const int64_t i = b0 + lane + 32 * k;
      if (i >= end) continue;
      t.m_codes[i] = uint8_t(nearest_code(m_mids, scaled_for_code(m[k], m_max, full)));
      t.v_codes[i] = uint8_t(nearest_code(v_mids, scaled_for_code(v[k], v_max, full)));
    }
    if (lane == 0) {
      t.m_absmax[block] = m_max;
      t.v_absmax[block] = v_max;
    }
  }
}

}  // namespace

cudaError_t launch_grad_sumsq(const AdamWTensor* tensors, const AdamWChunk* chunks, int64_t num_chunks,
                              DType grad_dtype, float* partials, cudaStream_t stream) {
  if (num_chunks == 0) return cudaSuccess;
  switch (grad_dtype) {
    case DType::kFloat32:
      grad_sumsq_kernel<float><<<num_chunks, kThreads, 0, stream>>>(tensors, chunks, partials);
      break;
    case DType::kBFloat16:
      grad_sumsq_kernel<__nv_bfloat16><<<num_chunks, kThreads, 0, stream>>>(tensors, chunks, partials);
      break;
    case DType::kFloat16:
      grad_sumsq_kernel<__half><<<num_chunks, kThreads, 0, stream>>>(tensors, chunks, partials);
      break;
  }
  return cudaGetLastError();
}

cudaError_t launch_grad_norm_finish(const float* partials, int64_t num_chunks, float inv_scale, float max_norm,
                                    float* out, cudaStream_t stream) {
  grad_norm_finish_kernel<<<1, 1024, 0, stream>>>(partials, num_chunks, inv_scale, max_norm, out);
  return cudaGetLastError();
}

namespace {

template <typename G>
void launch_adamw_as(const AdamWTensor* tensors, const AdamWChunk* chunks, int64_t num_chunks, float lr, float beta1,
                     float beta2, float eps, float bc1, float bc2, const float* scale, bool stochastic,
                     cudaStream_t stream) {
  if (stochastic)
    adamw_kernel<G, true><<<num_chunks, kThreads, 0, stream>>>(tensors, chunks, lr, beta1, beta2, eps, bc1, bc2, scale);
  else
    adamw_kernel<G, false>
        <<<num_chunks, kThreads, 0, stream>>>(tensors, chunks, lr, beta1, beta2, eps, bc1, bc2, scale);
}

}  // namespace

cudaError_t launch_adamw(const AdamWTensor* tensors, const AdamWChunk* chunks, int64_t num_chunks, DType grad_dtype,
                         float lr, float beta1, float beta2, float eps, float bc1, float bc2, const float* scale,
                         bool stochastic, cudaStream_t stream) {
  if (num_chunks == 0) return cudaSuccess;
  switch (grad_dtype) {
    case DType::kFloat32:
      launch_adamw_as<float>(tensors, chunks, num_chunks, lr, beta1, beta2, eps, bc1, bc2, scale, stochastic, stream);
      break;
    case DType::kBFloat16:
      launch_adamw_as<__nv_bfloat16>(tensors, chunks, num_chunks, lr, beta1, beta2, eps, bc1, bc2, scale, stochastic,
                                     stream);
      break;
    case DType::kFloat16:
      launch_adamw_as<__half>(tensors, chunks, num_chunks, lr, beta1, beta2, eps, bc1, bc2, scale, stochastic, stream);
      break;
  }
  return cudaGetLastError();
}

cudaError_t launch_adamw8bit(const AdamW8bitTensor* tensors, const AdamWChunk* chunks, int64_t num_chunks,
                             DType grad_dtype, const AdamW8bitMaps& maps, const AdamW8bitStep& step, const float* scale,
                             bool stochastic, cudaStream_t stream) {
  if (num_chunks == 0) return cudaSuccess;
  const auto go = [&](auto kernel) { kernel<<<num_chunks, 256, 0, stream>>>(tensors, chunks, maps, step, scale); };
  switch (grad_dtype) {
    case DType::kFloat32: stochastic ? go(adamw8bit_kernel<float, true>) : go(adamw8bit_kernel<float, false>); break;
    case DType::kBFloat16:
      stochastic ? go(adamw8bit_kernel<__nv_bfloat16, true>) : go(adamw8bit_kernel<__nv_bfloat16, false>);
      break;
    case DType::kFloat16: stochastic ? go(adamw8bit_kernel<__half, true>) : go(adamw8bit_kernel<__half, false>); break;
  }
  return cudaGetLastError();
}

}  // namespace llmtrain::kernels
