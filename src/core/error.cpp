#include "llmtrain/core/error.h"

namespace llmtrain::detail {

void throw_error(const std::string& message) { throw Error(message); }

}  // namespace llmtrain::detail
