// Byte-level BPE, the engine of GPT-2's tokenizer and of Hugging Face tokenizer.json files of that kind
// (Llama 3, Qwen2): text split into pieces by a pre-tokenisation pattern (PCRE2 with its JIT), and each
// piece's bytes merged pairwise, lowest-ranked pair first, until no ranked pair is left. Internal to
// src/tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace llmtrain::tokenizer::detail {

/// GPT-2's printable stand-ins for bytes (printable Latin-1 bytes for themselves, the other 68 bytes
/// U+0100.. in byte order), as vocabularies and merge lists of byte-level BPE write tokens: the bytes
/// of `token`. Throws llmtrain::Error naming `file` for a character that stands for no byte.
std::string token_bytes(const std::string& token, const std::string& file);

/// White_Space, as the patterns of tiktoken and Hugging Face's tokenizers mean \s: PCRE2's \s adds
/// U+180E. The members, for use inside a character class.
extern const char* const kWhiteSpaceMembers;

/// Throws llmtrain::Error, starting with `who`, for text that is not valid UTF-8 (naming the byte) or
/// is 2 GB or more (the ids of one call are counted in int32).
void check_encodable(std::string_view text, const char* who);

/// A byte-level BPE over a vocabulary of token bytes.
class ByteBPE {
 public:
  /// One merge rule: two tokens' bytes that merge into their concatenation (which must be a token),
  /// and where the rule was read, for errors ("merges.txt:3: merge \"a b\"").
  struct Merge {
    std::string left, right, where;
  };
  /// `bytes_of`: id -> the token's bytes, read from `vocab_source`; ids in `unmergeable` (special
  /// tokens) are never produced by merging text. `merges` in rank order. `patterns`: the
  /// pre-tokenisation regexes (PCRE2, UTF, UCP), applied one after another: each splits every piece
  /// the one before made into its matches and the stretches between them (tokenizers' Split with
  /// behaviour Isolated). `whole_first`: a piece that is a token as a whole becomes that token without
  /// merging (tiktoken's rule, and tokenizers' ignore_merges).
  ByteBPE(std::vector<std::string> bytes_of, const std::vector<int32_t>& unmergeable, const std::vector<Merge>& merges,
          const std::vector<std::string>& patterns, bool whole_first, const std::string& vocab_source);
  ~ByteBPE();

  /// Appends the ids of `text`, valid UTF-8 under 2 GB with no special tokens in it.
  void encode_ordinary(std::string_view text, std::vector<int32_t>& out) const;
  /// id -> bytes.
  const std::vector<std::string>& bytes_of() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain::tokenizer::detail
