// SentencePiece models (Llama/Mistral-style tokenizer.model files, or ones trained here) behind the
// Tokenizer interface. Decoding is done piece by piece to raw bytes (byte-fallback pieces become their
// byte), so split UTF-8 characters survive; the model's dummy-prefix space is removed once at the
// start of the text, as SentencePiece itself does.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::tokenizer {

/// A SentencePiece model behind the Tokenizer interface.
///   llmtrain::tokenizer::SentencePiece sp("tokenizer.model");  auto ids = sp.encode("Hello");
class SentencePiece final : public Tokenizer {
 public:
  /// Throws llmtrain::Error naming the file when it is missing or not a SentencePiece model.
  explicit SentencePiece(const std::string& model_path);
  /// The model serialized in `model_bytes` (a .model file's content); `name` names it in errors.
  SentencePiece(const std::string& name, const std::string& model_bytes);
  ~SentencePiece() override;

  /// With `allow_special`, the end- and beginning-of-sequence pieces' texts ("</s>", "<s>") become their ids.
  std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  /// The end-of-sequence id (e.g. </s> = 2 for Llama), if the model has one.
  std::optional<int32_t> eot_id() const override;
  std::optional<std::string> eot_text() const override;
  /// The beginning-of-sequence id (<s> = 1 for Llama 2 and Mistral), which Llama-family models start
  /// their input with (as transformers' LlamaTokenizer adds it), if the model has one.
  std::optional<int32_t> bos_id() const override;
  std::optional<std::string> bos_text() const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// What train_sentencepiece builds.
struct SentencePieceTrainOptions {
  std::vector<std::string> inputs;  // text files, one sentence or paragraph a line
  std::string model_prefix;         // writes <prefix>.model and <prefix>.vocab
  std::string model_type = "bpe";   // "bpe" or "unigram"
  int64_t vocab_size = 8000;
  double character_coverage = 0.9995;
  bool byte_fallback = true;         // unknown characters become byte pieces, never <unk>
  bool keep_whitespace = true;       // text as it is: newlines (byte pieces) and runs of spaces kept; false:
                                     // SentencePiece's NFKC, which folds them into single spaces
  int64_t max_sentences = 0;         // 0: every line; else a random sample of this many
  int64_t max_line_bytes = 1 << 16;  // longer lines are skipped (SentencePiece's own default: 4192)
  bool force = false;                // replace existing <prefix>.model / .vocab files
};

/// Trains a new SentencePiece model into <prefix>.model and <prefix>.vocab (each written beside its name
/// and renamed over it; existing ones only with `force`). Throws llmtrain::Error naming the option or
/// file at fault.
///   llmtrain::tokenizer::train_sentencepiece({.inputs = {"corpus.txt"}, .model_prefix = "out/sp"});
void train_sentencepiece(const SentencePieceTrainOptions& options);

}  // namespace llmtrain::tokenizer
