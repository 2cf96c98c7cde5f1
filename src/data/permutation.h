// Seeded permutations shared by the data loaders: the same order on every platform and standard
// library (Fisher-Yates on mt19937_64, whose output the standard fixes; std::shuffle's is not).
#pragma once

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace llmtrain::data::detail {

inline std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t a, uint64_t b, bool shuffle) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  if (!shuffle) return p;
  std::seed_seq seq{uint32_t(seed), uint32_t(seed >> 32), uint32_t(a), uint32_t(a >> 32), uint32_t(b), uint32_t(b >> 32)};
  std::mt19937_64 rng(seq);
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[size_t(i)], p[size_t(rng() % uint64_t(i + 1))]);
  return p;
}

}  // namespace llmtrain::data::detail
