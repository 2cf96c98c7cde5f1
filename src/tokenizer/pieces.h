// What the tokenizers share: splitting text around a special token's text, and joining the bytes of
// ids. Internal to src/tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "llmtrain/core/error.h"

namespace llmtrain::tokenizer::detail {

/// Appends the ids of `text`: each occurrence of `special` becomes `special_id`, the (non-empty) text
/// between goes through `plain(part, out)`.
template <typename Plain>
void encode_with_special(std::string_view text, std::string_view special, int32_t special_id, Plain&& plain,
                         std::vector<int32_t>& out) {
  for (size_t start = 0;;) {
    const size_t at = text.find(special, start);
    const std::string_view part = text.substr(start, at == std::string_view::npos ? at : at - start);
    if (!part.empty()) plain(part, out);
    if (at == std::string_view::npos) return;
    out.push_back(special_id);
    start = at + special.size();
  }
}

/// The bytes of `ids`, concatenated; `who` names the tokenizer when an id is out of range.
inline std::string join_pieces(const std::vector<std::string>& bytes_of, const std::vector<int32_t>& ids,
                               const char* who) {
  std::string out;
  for (const int32_t id : ids) {
    LLMTRAIN_CHECK(id >= 0 && id < int32_t(bytes_of.size()), who, "::decode: id ", id,
                   " is outside the vocabulary [0, ", bytes_of.size(), ")");
    out += bytes_of[size_t(id)];
  }
  return out;
}

}  // namespace llmtrain::tokenizer::detail
