// Hugging Face tokenizer.json files of the byte-level BPE kind (Llama 3, Qwen2, SmolLM2, GPT-2 as
// tokenizers writes it): the vocabulary and merges, the pre-tokeniser's pattern, and the added tokens,
// with bos as the post-processor adds it and eos as the folder's tokenizer_config.json names it.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::tokenizer {

/// A tokenizer.json (model "BPE", byte-level) behind the Tokenizer interface. What it takes: no
/// normalizer, or NFC (in a build with ICU); a ByteLevel pre-tokenizer (its GPT-2 pattern), or a Sequence of Split
/// patterns (behavior Isolated) and a ByteLevel without its pattern; added tokens (special ones extracted when encode's
/// allow_special, others always), without lstrip, rstrip or single_word. Anything else is refused with an error naming
/// the file and the key.
///   auto tok = llmtrain::tokenizer::HFTokenizer::from_dir("Llama-3.2-1B");
///   auto ids = tok->encode("Hello world");  // no bos: bos_id() says which one the model starts with
class HFTokenizer final : public Tokenizer {
 public:
  /// `json_path`: the tokenizer.json file; `config_path` (optional, "" for none): the
  /// tokenizer_config.json whose bos_token and eos_token name the bos and the end-of-text tokens
  /// (without it: the post-processor's first special token, and "<|endoftext|>" when there is one).
  explicit HFTokenizer(const std::string& json_path, const std::string& config_path = "");
  ~HFTokenizer() override;
  /// `dir`/tokenizer.json, with `dir`/tokenizer_config.json when it is there.
  static std::unique_ptr<HFTokenizer> from_dir(const std::string& dir);
  /// The files from_dir reads: tokenizer.json, then tokenizer_config.json when there is one.
  static std::vector<std::string> files_in(const std::string& dir);

  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  std::optional<int32_t> eot_id() const override;
  std::optional<std::string> eot_text() const override;
  std::optional<int32_t> bos_id() const override;
  std::optional<std::string> bos_text() const override;
  /// An added token's id by its text ("<|eot_id|>", "<|im_end|>"), if the file has it.
  std::optional<int32_t> added_token(const std::string& text) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain::tokenizer
