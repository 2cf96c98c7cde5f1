// LibTorch's part of llmtrain::describe: c10::Error said without its C++ backtrace. llmtrain::text has
// describe() itself and no LibTorch, so libllmtrain hands it this when it loads.
#include <c10/util/Exception.h>

#include "llmtrain/core/error.h"

namespace llmtrain::detail {
namespace {

std::optional<std::string> describe_c10(const std::exception& e) {
  if (const auto* c10 = dynamic_cast<const c10::Error*>(&e)) return c10->what_without_backtrace();
  return std::nullopt;
}

const bool registered = (set_library_describer(&describe_c10), true);

}  // namespace
}  // namespace llmtrain::detail
