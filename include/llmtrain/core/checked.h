// Size arithmetic on numbers read from files, configs and the environment. Every product and sum of
// such sizes is checked, so that a hostile or mistaken size is an error naming it, never a wrapped
// number (a wrapped product once reached a division by zero).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "llmtrain/core/error.h"

namespace llmtrain {

/// a + b for sizes; throws llmtrain::Error naming `what` when either is negative or the sum leaves int64.
///   const int64_t bytes = add_checked(header, body, "shard " + path);
inline int64_t add_checked(int64_t a, int64_t b, const std::string& what) {
  int64_t r = 0;
  LLMTRAIN_CHECK(a >= 0 && b >= 0 && !__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b,
                 a < 0 || b < 0 ? " has a negative size" : " overflows 64-bit sizes");
  return r;
}

/// The product of sizes; throws llmtrain::Error naming `what` when one is negative or it leaves int64.
///   const int64_t tokens = product_checked({batch, seq_len, world}, "batch_size x seq_len x ranks");
inline int64_t product_checked(std::initializer_list<int64_t> factors, const std::string& what) {
  int64_t r = 1;
  for (const int64_t f : factors) {
    LLMTRAIN_CHECK(f >= 0, what, ": the size ", f, " is negative");
    LLMTRAIN_CHECK(!__builtin_mul_overflow(r, f, &r), what, ": the product of ", f, " and the sizes before it ",
                   "overflows 64-bit sizes");
  }
  return r;
}

}  // namespace llmtrain
