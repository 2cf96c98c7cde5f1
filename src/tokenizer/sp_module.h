// The boundary between llmtrain and libsentencepiece. Debian's libsentencepiece exports a 32-byte flag
// object named FLAGS_minloglevel, and LibTorch's libc10 a 4-byte int of the same name: loaded into one
// symbol scope, sentencepiece's constructor writes its object over libc10's flags (among them the one
// that turns every failed allocation into an abort). So libsentencepiece is reached only through this
// table, from a module (libllmtrain_sentencepiece.so) that sentencepiece.cpp opens with RTLD_DEEPBIND,
// where sentencepiece binds to its own symbols; builds without LibTorch (the fuzzers) link it directly.
// No exception crosses the table: errors come back as text.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace llmtrain::tokenizer::detail {

/// What a SentencePiece id stands for.
enum class SpPieceKind : int { kNormal = 0, kUnknown = 1, kControl = 2, kUserDefined = 3, kUnused = 4, kByte = 5 };

/// libsentencepiece's calls that llmtrain makes. A model is an opaque handle.
struct SpApi {
  int version;  // kSpApiVersion of the module's build
  /// A model from the bytes of a .model file; null with `error` set when they are not one.
  void* (*load)(const char* bytes, size_t size, std::string* error);
  void (*free)(void* model);
  int (*piece_count)(const void* model);
  SpPieceKind (*piece_kind)(const void* model, int id);
  /// The piece's text ("▁the", "<0x0A>", "</s>").
  void (*piece)(const void* model, int id, std::string* out);
  /// The end-of-sequence id, or -1.
  int (*eos_id)(const void* model);
  /// The ids of `text`; false with `error` set on failure.
  bool (*encode)(const void* model, const char* text, size_t size, std::vector<int>* ids, std::string* error);
  /// SentencePieceTrainer::Train with these flags; false with `error` set on failure.
  bool (*train)(const std::vector<std::pair<std::string, std::string>>* flags, std::string* error);
};

constexpr int kSpApiVersion = 1;

/// The table: from the module (opened once, on first use) or linked in. Throws llmtrain::Error naming
/// the module file when it cannot be opened.
const SpApi& sp_api();

}  // namespace llmtrain::tokenizer::detail

/// The module's one entry point.
extern "C" const llmtrain::tokenizer::detail::SpApi* llmtrain_sentencepiece_api();
