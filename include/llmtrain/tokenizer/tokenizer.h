// The interface every tokenizer of llmtrain implements: text (UTF-8 bytes) to token ids and back.
// Decoding returns the tokens' raw bytes, so ids that split a UTF-8 character lose nothing: the
// concatenation of decode() over consecutive pieces equals decode() of the whole (SentencePiece models
// drop their dummy-prefix space at the start of each call, as SentencePiece does).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace llmtrain::tokenizer {

/// Text to ids and back.
///   auto ids = tok.encode("Hello world");  std::string text = tok.decode(ids);
class Tokenizer {
 public:
  virtual ~Tokenizer() = default;

  /// Ids for `text` (UTF-8). Special tokens (e.g. "<|endoftext|>") become their ids only when
  /// `allow_special`; otherwise their text is encoded like any other. Throws llmtrain::Error for
  /// text that is not valid UTF-8, naming the byte offset.
  virtual std::vector<int32_t> encode(std::string_view text, bool allow_special = false) const = 0;

  /// The bytes of the tokens, concatenated. Throws llmtrain::Error for an id outside the vocabulary.
  virtual std::string decode(const std::vector<int32_t>& ids) const = 0;

  /// Number of ids (the largest id + 1).
  virtual int64_t vocab_size() const = 0;

  /// The end-of-text id that separates documents, if the vocabulary has one.
  virtual std::optional<int32_t> eot_id() const = 0;
  /// That id's text ("<|endoftext|>", "</s>"), which encode(..., allow_special) reads as the id.
  virtual std::optional<std::string> eot_text() const = 0;
  /// The id a model's input starts with (Llama's <s> and <|begin_of_text|>), if its family uses one;
  /// encode() never adds it.
  virtual std::optional<int32_t> bos_id() const { return std::nullopt; }
  /// That id's text ("<s>", "<|begin_of_text|>"), which encode(..., allow_special) reads as the id.
  virtual std::optional<std::string> bos_text() const { return std::nullopt; }
};

/// Offset of the first byte that breaks UTF-8 in `s` (overlong forms, surrogates and values past
/// U+10FFFF included), or npos when it is valid.
size_t invalid_utf8_at(std::string_view s);

/// `bytes` (what decode() returns) made printable: each byte that breaks UTF-8 becomes U+FFFD, so a
/// lone byte-fallback piece or a character cut by a token limit never writes invalid UTF-8.
///   std::puts(llmtrain::tokenizer::printable_utf8(tok->decode(ids)).c_str());
std::string printable_utf8(std::string_view bytes);

/// The length of `bytes` without a character left incomplete at its end (one more token may complete
/// it): how much of a growing text a stream can print now.
size_t complete_utf8_prefix(std::string_view bytes);

/// The token ids in `text`, a JSON array of integers, each in [0, limit). Throws llmtrain::Error naming
/// `what` and the first entry that is no such id (never wrapping a large number into range).
///   auto ids = llmtrain::tokenizer::parse_ids("[15496, 995]", "--decode input", tok->vocab_size());
std::vector<int32_t> parse_ids(std::string_view text, const std::string& what, int64_t limit);

/// Loads a tokenizer by kind: "gpt2" reads a GPT-2 BPE folder (encoder.json + vocab.bpe or vocab.json +
/// merges.txt; an empty `path` means $LLMTRAIN_GPT2_DIR, else $LLMTRAIN_DATA_DIR/gpt2);
/// "sentencepiece" reads a SentencePiece .model file; "hf" a folder with a Hugging Face tokenizer.json
/// (and its tokenizer_config.json, when there is one). Throws llmtrain::Error for other kinds and for
/// missing files, naming what was looked for.
///   auto tok = llmtrain::tokenizer::load_tokenizer("gpt2", "../shared/data/gpt2");
std::unique_ptr<Tokenizer> load_tokenizer(const std::string& kind, const std::string& path);

/// The files load_tokenizer(kind, path) reads, in a fixed order: the .model file, the GPT-2 folder's
/// vocabulary then its merges, or tokenizer.json then tokenizer_config.json. Throws llmtrain::Error as load_tokenizer
/// does when they are not there.
///   auto files = llmtrain::tokenizer::tokenizer_files("gpt2", "../shared/data/gpt2");  // encoder.json, vocab.bpe
std::vector<std::string> tokenizer_files(const std::string& kind, const std::string& path);

}  // namespace llmtrain::tokenizer
