// Seeded permutations shared by the data loaders: the same order on every platform and standard
// library (Fisher-Yates from the last element on mt19937 or mt19937_64, whose outputs the standard
// fixes; std::shuffle's are not).
#pragma once

#include <cstdint>
#include <numeric>
#include <random>
#include <vector>

namespace llmtrain::data::detail {

/// Fisher-Yates in place, one draw per element but the first (as llm.c's random_permutation).
template <class Engine>
void shuffle_in_place(std::vector<int64_t>& p, Engine& rng) {
  for (int64_t i = int64_t(p.size()) - 1; i > 0; --i)
    std::swap(p[size_t(i)], p[size_t(uint64_t(rng()) % uint64_t(i + 1))]);
}

inline std::vector<int64_t> identity(int64_t n) {
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), 0);
  return p;
}

inline std::vector<int64_t> permutation(int64_t n, uint64_t seed, uint64_t a, uint64_t b, bool shuffle) {
  std::vector<int64_t> p = identity(n);
  if (!shuffle) return p;
  std::seed_seq seq{uint32_t(seed),    uint32_t(seed >> 32), uint32_t(a),
                    uint32_t(a >> 32), uint32_t(b),          uint32_t(b >> 32)};
  std::mt19937_64 rng(seq);
  shuffle_in_place(p, rng);
  return p;
}

}  // namespace llmtrain::data::detail
