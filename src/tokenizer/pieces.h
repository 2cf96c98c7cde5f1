// What the tokenizers share: splitting text around special tokens' texts, joining the bytes of ids,
// and Unicode's NFC. Internal to src/tokenizer.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "llmtrain/core/error.h"

namespace llmtrain::tokenizer::detail {

/// A special token's text and id.
struct Special {
  std::string_view text;
  int32_t id;
};

/// Appends the ids of `text`: each occurrence of a special token's text becomes its id (the earliest
/// first; at one place the longest), the (non-empty) text between goes through `plain(part, out)`.
template <typename Plain>
void encode_with_special(std::string_view text, const std::vector<Special>& specials, Plain&& plain,
                         std::vector<int32_t>& out) {
  for (size_t start = 0;;) {
    size_t at = std::string_view::npos;
    const Special* found = nullptr;
    for (const Special& s : specials) {
      const size_t k = s.text.empty() ? std::string_view::npos : text.find(s.text, start);
      if (k < at || (k == at && k != std::string_view::npos && s.text.size() > found->text.size())) {
        at = k;
        found = &s;
      }
    }
    const std::string_view part = text.substr(start, at == std::string_view::npos ? at : at - start);
    if (!part.empty()) plain(part, out);
    if (!found) return;
    out.push_back(found->id);
    start = at + found->text.size();
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

/// Whether this build has NFC (ICU).
bool nfc_available();
/// `text` (valid UTF-8) in Unicode's normalization form C; ASCII and text already in NFC come back as
/// they are. Throws llmtrain::Error in a build without ICU.
std::string to_nfc(std::string_view text);

}  // namespace llmtrain::tokenizer::detail
