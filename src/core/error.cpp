#include "llmtrain/core/error.h"

#include <atomic>
#include <new>

namespace llmtrain {
namespace {

std::atomic<detail::LibraryDescriber> library_describer{nullptr};

}  // namespace

std::string describe(const std::exception& e) {
  if (const auto describer = library_describer.load())
    if (auto said = describer(e)) return *said;
  if (dynamic_cast<const std::bad_alloc*>(&e))
    return std::string("out of memory: an allocation failed (") + e.what() + "); use a smaller model or batch";
  return e.what();
}

namespace detail {

void throw_error(const std::string& message) { throw Error(message); }

void set_library_describer(LibraryDescriber describer) { library_describer.store(describer); }

}  // namespace detail
}  // namespace llmtrain
