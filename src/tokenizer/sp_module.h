// The boundary between llmtrain and libsentencepiece. Debian's libsentencepiece exports a 32-byte flag
// object named FLAGS_minloglevel (and a copy of protobuf's symbols), and LibTorch's libc10 a 4-byte int
// of the same name: loaded into one symbol scope, sentencepiece's constructor writes its object over
// libc10's flags (among them the one that turns every failed allocation into an abort). So
// libsentencepiece is reached only through this table, from a module (libllmtrain_sentencepiece.so)
// that sentencepiece.cpp opens with dlmopen in a link-map namespace of its own, with its own libstdc++
// and C library. (RTLD_DEEPBIND, tried first, is not enough: libstdc++'s objects that an executable
// holds copies of, std::cerr and the locale facets' ids, exist twice under it, and sentencepiece's
// logging and locale use crashed.) Builds without LibTorch (the fuzzers) link it directly.
// Nothing allocated on one side is freed on the other, and no exception crosses: results and errors
// come back as pointers into storage the module keeps (the calling thread's, valid until its next call
// into the table; a piece's, while its model lives), which the caller copies.
#pragma once

#include <cstddef>

namespace llmtrain::tokenizer::detail {

/// What a SentencePiece id stands for.
enum class SpPieceKind : int { kNormal = 0, kUnknown = 1, kControl = 2, kUserDefined = 3, kUnused = 4, kByte = 5 };

/// libsentencepiece's calls that llmtrain makes. A model is an opaque handle; `error` receives a text
/// (the thread's, valid until its next call) when a call fails.
struct SpApi {
  int version;  // kSpApiVersion of the module's build
  /// A model from the bytes of a .model file; null when they are not one.
  void* (*load)(const char* bytes, size_t size, const char** error);
  void (*free)(void* model);
  int (*piece_count)(const void* model);
  SpPieceKind (*piece_kind)(const void* model, int id);
  /// The piece's text ("▁the", "<0x0A>", "</s>"), `size` bytes, while the model lives.
  const char* (*piece)(const void* model, int id, size_t* size);
  /// The end-of-sequence id, or -1.
  int (*eos_id)(const void* model);
  /// The beginning-of-sequence id, or -1.
  int (*bos_id)(const void* model);
  /// The ids of `text`, `count` of them (the thread's, valid until its next call); null on failure.
  const int* (*encode)(const void* model, const char* text, size_t size, size_t* count, const char** error);
  /// SentencePieceTrainer::Train with the flags keys[i]=values[i]; false on failure.
  bool (*train)(const char* const* keys, const char* const* values, size_t count, const char** error);
};

constexpr int kSpApiVersion = 3;

/// The table: from the module (opened once, on first use) or linked in. Throws llmtrain::Error naming
/// the module file when it cannot be opened.
const SpApi& sp_api();

}  // namespace llmtrain::tokenizer::detail

/// The module's one entry point.
extern "C" const llmtrain::tokenizer::detail::SpApi* llmtrain_sentencepiece_api();
