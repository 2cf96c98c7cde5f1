// GPT-2's byte-level BPE. Text is split into pieces by GPT-2's pre-tokenisation pattern (PCRE2 with
// its JIT), and each piece's bytes are merged pairwise, lowest-ranked pair first, until no ranked
// pair is left: the same ids as OpenAI's encoder and tiktoken's "gpt2".
#pragma once

#include <memory>
#include <string>
#include <utility>

#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::tokenizer {

/// GPT-2 tokenizer from OpenAI's encoder.json + vocab.bpe or Hugging Face's vocab.json + merges.txt.
///   auto tok = llmtrain::tokenizer::GPT2BPE::from_dir("../shared/data/gpt2");
///   auto ids = tok->encode("Hello world");  // {15496, 995}
class GPT2BPE final : public Tokenizer {
 public:
  /// Reads a vocabulary (token -> id JSON) and a merge list ("#version" line, then "a b" per line).
  GPT2BPE(const std::string& vocab_json_path, const std::string& merges_path);
  ~GPT2BPE() override;

  /// Loads `dir`/encoder.json + vocab.bpe, else `dir`/vocab.json + merges.txt. Throws
  /// llmtrain::Error naming the directory and the files looked for when neither pair is there.
  static std::unique_ptr<GPT2BPE> from_dir(const std::string& dir);
  /// The two files from_dir reads, {vocabulary, merges}; throws as from_dir does.
  static std::pair<std::string, std::string> files_in(const std::string& dir);

  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> eot_id() const override;
  std::optional<std::string> eot_text() const override;

  /// GPT-2's document separator, "<|endoftext|>" = 50256.
  static constexpr const char* kEndOfText = "<|endoftext|>";

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain::tokenizer
