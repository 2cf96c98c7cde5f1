// GPT-2 BPE encoding of any text with a small tokenizer: valid UTF-8 decodes back exactly; and a word of
// the merged letters, one piece however long (the heap merge past 64 bytes), gets exactly the ids of
// the plain algorithm (a piece that is a token is that token; else merge the lowest-ranked pair, the
// leftmost of equal ones, until none is left).
#include <algorithm>
#include <map>
#include <vector>

#include "fuzz_util.h"

namespace {

std::vector<std::string> reference_merge(const std::string& word) {
  static const std::map<std::pair<std::string, std::string>, int> ranks = [] {
    std::map<std::pair<std::string, std::string>, int> r;
    const std::string letters = "abcd";
    int rank = 0;
    for (char x : letters)
      for (char y : letters) r[{std::string{x}, std::string{y}}] = rank++;
    for (char x : letters)
      for (char y : letters)
        for (char z : letters) r[{std::string{x, y}, std::string{z, z}}] = rank++;
    return r;
  }();
  // A piece that is a token itself is that token (as in tiktoken and llmtrain), merges or not.
  if (word.size() <= 2 || (word.size() == 4 && word[2] == word[3])) return {word};
  std::vector<std::string> parts;
  for (char c : word) parts.emplace_back(1, c);
  for (;;) {
    int best = -1, best_rank = 1 << 30;
    for (size_t i = 0; i + 1 < parts.size(); ++i)
      if (const auto it = ranks.find({parts[i], parts[i + 1]}); it != ranks.end() && it->second < best_rank) {
        best_rank = it->second;
        best = int(i);
      }
    if (best < 0) return parts;
    parts[size_t(best)] += parts[size_t(best) + 1];
    parts.erase(parts.begin() + best + 1);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = fuzz::small_tokenizer();
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    fuzz::require(tok.decode(tok.encode(text)) == text);
    fuzz::require(tok.decode(tok.encode(text, /*allow_special=*/true)) == text);
  } catch (const llmtrain::Error&) {  // text that is not UTF-8
  }
  std::string word;
  for (size_t i = 0; i < std::min<size_t>(size, 4096); ++i) word += char('a' + data[i] % 4);
  if (word.empty()) return 0;
  std::string merged;
  for (const int32_t id : tok.encode(word)) merged += tok.decode({id}) + "|";
  std::string expected;
  for (const auto& part : reference_merge(word)) expected += part + "|";
  fuzz::require(merged == expected);
  return 0;
}
