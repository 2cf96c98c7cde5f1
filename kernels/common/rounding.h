// Stochastic rounding of float32 to bfloat16 from a counter-based hash: the random bits of element
// `index` depend only on (key, index), so the CUDA kernel and the CPU reference round alike whatever
// the launch shape, and a resumed run rounds as the uninterrupted one did. Plain integer arithmetic,
// compiled for host and device: src/ops/adamw.cpp derives each tensor's key with mix64, and its ATen
// reference computes the same bits in tensor ops (tests compare the two bit for bit).
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LLMTRAIN_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define LLMTRAIN_HOST_DEVICE inline
#endif

namespace llmtrain::kernels {

/// A 64-bit mix with full avalanche (the splitmix64 finalizer's shifts and multipliers).
LLMTRAIN_HOST_DEVICE uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/// The bfloat16 bit pattern of `x` rounded up with probability (x's dropped 16 bits) / 2^16, so the
/// expected value is x: small optimizer updates survive on average instead of being rounded away.
/// Non-finite values round to nearest (adding bits to a NaN could carry into the sign).
LLMTRAIN_HOST_DEVICE uint16_t bf16_bits_stochastic(float x, uint64_t key, int64_t index) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  if ((u & 0x7f800000u) == 0x7f800000u)  // inf stays inf; a NaN stays NaN (quiet bit set)
    return uint16_t((u >> 16) | ((u & 0x7fffffu) ? 0x40u : 0u));
  const uint32_t r = uint32_t(mix64(key + 0x9e3779b97f4a7c15ull * uint64_t(index + 1)) >> 48);
  return uint16_t((u + r) >> 16);
}

}  // namespace llmtrain::kernels
