#include "llmtrain/core/error.h"

#include <c10/util/Exception.h>

#include <new>

namespace llmtrain {

std::string describe(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return std::string("out of memory: an allocation failed (") + e.what() + "); use a smaller model or batch";
  return e.what();
}

namespace detail {

void throw_error(const std::string& message) { throw Error(message); }

}  // namespace detail
}  // namespace llmtrain
