// Small string tests that several layers need (internal to libllmtrain and libllmtrain_text; header-only).
#pragma once

#include <string_view>

namespace llmtrain::detail {

/// True when `s` ends with `suffix`.
inline bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace llmtrain::detail
