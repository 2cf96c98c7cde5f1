// llmtrain's errors. Anything a caller can get wrong (a config, a shape, a file) throws
// llmtrain::Error with a message that names the input and what was expected; nothing in the library
// exits the process. Internal invariants use TORCH_INTERNAL_ASSERT instead.
#pragma once

#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace llmtrain {

/// The exception thrown for bad input, naming the input and what was expected.
///   try { model->forward(idx); } catch (const llmtrain::Error& e) { std::cerr << e.what() << "\n"; }
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

/// What went wrong in `e`, said for a person: LibTorch's message without its C++ backtrace, an
/// allocation failure named as one. What the example programs print before they exit with status 1.
///   catch (const std::exception& e) { std::fprintf(stderr, "tool: %s\n", llmtrain::describe(e).c_str()); }
std::string describe(const std::exception& e);

namespace detail {

template <typename... Args>
std::string str_cat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

[[noreturn]] void throw_error(const std::string& message);

/// How describe() says the errors of a library below llmtrain (nullopt: not one of its own). libllmtrain
/// sets LibTorch's when it loads; llmtrain::text alone has none.
using LibraryDescriber = std::optional<std::string> (*)(const std::exception&);
void set_library_describer(LibraryDescriber describer);

}  // namespace detail
}  // namespace llmtrain

/// Throws llmtrain::Error built from the message parts when `cond` is false:
///   LLMTRAIN_CHECK(t <= block_size, "sequence length ", t, " exceeds block_size ", block_size);
#define LLMTRAIN_CHECK(cond, ...)                                                           \
  do {                                                                                      \
    if (!(cond)) ::llmtrain::detail::throw_error(::llmtrain::detail::str_cat(__VA_ARGS__)); \
  } while (0)
