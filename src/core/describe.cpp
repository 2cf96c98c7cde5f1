// llmtrain::describe, apart from error.cpp: it alone of core/error needs LibTorch (c10::Error).
#include <c10/util/Exception.h>

#include <new>

#include "llmtrain/core/error.h"

namespace llmtrain {

std::string describe(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return std::string("out of memory: an allocation failed (") + e.what() + "); use a smaller model or batch";
  return e.what();
}

}  // namespace llmtrain
