// libllmtrain_sentencepiece.so: libsentencepiece behind the table of sp_module.h (why a module: see
// there). It links nothing of llmtrain or LibTorch, and lets no exception out.
#include "sp_module.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <exception>
#include <memory>
#include <new>
#include <unordered_map>

namespace llmtrain::tokenizer::detail {
namespace {

using Processor = sentencepiece::SentencePieceProcessor;

const Processor& proc(const void* model) { return *static_cast<const Processor*>(model); }

// Runs `body`, turning an escaping exception into `error` (and `fallback` as the result).
template <typename F, typename R>
R guarded(std::string* error, R fallback, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    *error = e.what();
  } catch (...) {
    *error = "unknown error in libsentencepiece";
  }
  return fallback;
}

void* load(const char* bytes, size_t size, std::string* error) {
  return guarded(error, static_cast<void*>(nullptr), [&]() -> void* {
    auto p = std::make_unique<Processor>();
    const auto status = p->LoadFromSerializedProto({bytes, size});
    if (!status.ok()) {
      *error = status.ToString();
      return nullptr;
    }
    return p.release();
  });
}

void free_model(void* model) { delete static_cast<Processor*>(model); }

int piece_count(const void* model) { return proc(model).GetPieceSize(); }

SpPieceKind piece_kind(const void* model, int id) {
  const Processor& p = proc(model);
  if (p.IsByte(id)) return SpPieceKind::kByte;
  if (p.IsControl(id)) return SpPieceKind::kControl;
  if (p.IsUnknown(id)) return SpPieceKind::kUnknown;
  if (p.IsUnused(id)) return SpPieceKind::kUnused;
  return SpPieceKind::kNormal;
}

void piece(const void* model, int id, std::string* out) { *out = proc(model).IdToPiece(id); }

int eos_id(const void* model) { return proc(model).eos_id(); }

bool encode(const void* model, const char* text, size_t size, std::vector<int>* ids, std::string* error) {
  return guarded(error, false, [&] {
    const auto status = proc(model).Encode({text, size}, ids);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  });
}

bool train(const std::vector<std::pair<std::string, std::string>>* flags, std::string* error) {
  return guarded(error, false, [&] {
    const std::unordered_map<std::string, std::string> args(flags->begin(), flags->end());
    const auto status = sentencepiece::SentencePieceTrainer::Train(args);
    if (!status.ok()) *error = status.ToString();
    return status.ok();
  });
}

constexpr SpApi kApi = {kSpApiVersion, load, free_model, piece_count, piece_kind, piece, eos_id, encode, train};

}  // namespace
}  // namespace llmtrain::tokenizer::detail

extern "C" __attribute__((visibility("default"))) const llmtrain::tokenizer::detail::SpApi* llmtrain_sentencepiece_api() {
  return &llmtrain::tokenizer::detail::kApi;
}
