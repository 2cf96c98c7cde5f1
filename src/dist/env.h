// Integer settings from the environment (the launch's variables, LLMTRAIN_DIST_TIMEOUT).
#pragma once

#include <cerrno>
#include <climits>
#include <cstdlib>

#include "llmtrain/core/error.h"

namespace llmtrain::dist::detail {

// The variable `name` as an integer in [min, max]; `fallback` when it is unset, an error naming it when
// it is malformed or out of range.
inline long env_long(const char* name, long fallback, long min = LONG_MIN, long max = LONG_MAX) {
  const char* v = std::getenv(name);
  if (!v) return fallback;
  char* end = nullptr;
  errno = 0;
  const long n = std::strtol(v, &end, 10);
  LLMTRAIN_CHECK(*v && *end == 0 && errno == 0, "the environment variable ", name, "=\"", v, "\" is not an integer");
  LLMTRAIN_CHECK(n >= min && n <= max, "the environment variable ", name, "=", n, " is outside [", min, ", ", max, "]");
  return n;
}
}  // namespace llmtrain::dist::detail
