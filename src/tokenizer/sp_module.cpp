// libllmtrain_sentencepiece.so: libsentencepiece behind the table of sp_module.h (why a module: see
// there). It links nothing of llmtrain or LibTorch, and lets no exception out.
#include "sp_module.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace llmtrain::tokenizer::detail {
namespace {

using Processor = sentencepiece::SentencePieceProcessor;

const Processor& proc(const void* model) { return *static_cast<const Processor*>(model); }

// The calling thread's results and error text, handed out by pointer (sp_module.h).
thread_local std::string t_error;
thread_local std::vector<int> t_ids;

// Runs `body`, turning an escaping exception into `*error` (and `fallback` as the result).
template <typename F, typename R>
R guarded(const char** error, R fallback, F&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    t_error = e.what();
  } catch (...) {
    t_error = "unknown error in libsentencepiece";
  }
  *error = t_error.c_str();
  return fallback;
}

// A failed status as `*error`, and `fallback` as the result.
template <typename R>
R failed(const sentencepiece::util::Status& status, const char** error, R fallback) {
  t_error = status.ToString();
  *error = t_error.c_str();
  return fallback;
}

// ---- What libsentencepiece takes on trust --------------------------------------------------------
// A model's normalizer tables (precompiled_charsmap: a darts-clone double-array trie, then the
// replacement strings) are followed without bounds checks when text is normalised, so a corrupt one
// reads outside its memory (found by the fuzzer). They are checked here first, from the model's
// protobuf wire format: ModelProto field 3 (normalizer_spec) and 5 (denormalizer_spec), each a
// NormalizerSpec whose field 2 is the table.

// Reads a varint at p (advancing it); false past `end` or beyond 64 bits.
bool read_varint(const unsigned char*& p, const unsigned char* end, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p == end) return false;
    const unsigned char b = *p++;
    *v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

// Calls f(field, bytes) for each length-delimited field of the message [p, end); false when the wire
// format is broken (libsentencepiece's parser then refuses the model anyway).
template <typename F>
bool each_bytes_field(const unsigned char* p, const unsigned char* end, F&& f) {
  while (p < end) {
    uint64_t key = 0, v = 0;
    if (!read_varint(p, end, &key)) return false;
    switch (key & 7) {
      case 0:
        if (!read_varint(p, end, &v)) return false;
        break;
      case 1:
        if (end - p < 8) return false;
        p += 8;
        break;
      case 5:
        if (end - p < 4) return false;
        p += 4;
        break;
      case 2:
        if (!read_varint(p, end, &v) || v > uint64_t(end - p)) return false;
        f(key >> 3, std::string_view(reinterpret_cast<const char*>(p), size_t(v)));
        p += v;
        break;
      default: return false;
    }
  }
  return true;
}

uint32_t le32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// "" when the table is safe to follow: every trie node's children (its offset XOR any byte) and every
// leaf's value lie inside the table, and the replacement strings end with a NUL. (Darts-clone units:
// bit 8 has a leaf, bit 9 and bits 10-31 the offset, bit 31 and bits 0-7 the label, bits 0-30 a value.)
std::string check_charsmap(std::string_view blob) {
  if (blob.empty()) return "";
  if (blob.size() < 4) return "shorter than its 4-byte length";
  const uint64_t trie_bytes = le32(blob.data());
  if (trie_bytes > blob.size() - 4 || trie_bytes % 4 != 0) return "its trie length does not fit the table";
  const uint64_t units = trie_bytes / 4;
  const std::string_view strings = blob.substr(4 + trie_bytes);
  if (!strings.empty() && strings.back() != '\0') return "its replacement strings do not end with a NUL";
  const char* trie = blob.data() + 4;
  const auto offset = [](uint32_t u) { return uint64_t(u >> 10) << ((u & (1u << 9)) >> 6); };
  for (uint64_t i = 0; i < units; ++i) {
    const uint32_t u = le32(trie + 4 * i);
    // A unit with bit 31 set holds a leaf's value: its label matches no byte, so no search passes through
    // it (but the root, where every search starts).
    if (i != 0 && (u >> 31)) continue;
    const uint64_t base = i ^ offset(u);
    if ((base | 0xFF) >= units) return "a trie node points outside the trie";
    if (u & (1u << 8)) {  // has a leaf: its value is a place in the replacement strings
      const uint32_t leaf = le32(trie + 4 * base);
      if ((leaf & 0x7FFFFFFFu) >= strings.size()) return "a trie leaf points outside the replacement strings";
    }
  }
  return "";
}

std::string check_normalizers(const char* bytes, size_t size) {
  std::string problem;
  const auto* p = reinterpret_cast<const unsigned char*>(bytes);
  each_bytes_field(p, p + size, [&](uint64_t field, std::string_view spec) {
    if ((field != 3 && field != 5) || !problem.empty()) return;
    const auto* s = reinterpret_cast<const unsigned char*>(spec.data());
    each_bytes_field(s, s + spec.size(), [&](uint64_t f, std::string_view table) {
      if (f == 2 && problem.empty()) {
        const std::string why = check_charsmap(table);
        if (!why.empty())
          problem = std::string(field == 3 ? "its normalizer" : "its denormalizer") + " table is corrupt: " + why;
      }
    });
  });
  return problem;
}

void* load(const char* bytes, size_t size, const char** error) {
  return guarded(error, static_cast<void*>(nullptr), [&]() -> void* {
    if (std::string problem = check_normalizers(bytes, size); !problem.empty()) {
      t_error = std::move(problem);
      *error = t_error.c_str();
      return nullptr;
    }
    auto p = std::make_unique<Processor>();
    const auto status = p->LoadFromSerializedProto({bytes, size});
    if (!status.ok()) return failed(status, error, static_cast<void*>(nullptr));
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

const char* piece(const void* model, int id, size_t* size) {
  const std::string& p = proc(model).IdToPiece(id);  // the model's own
  *size = p.size();
  return p.data();
}

int eos_id(const void* model) { return proc(model).eos_id(); }
int bos_id(const void* model) { return proc(model).bos_id(); }

const int* encode(const void* model, const char* text, size_t size, size_t* count, const char** error) {
  return guarded(error, static_cast<const int*>(nullptr), [&]() -> const int* {
    t_ids.clear();
    const auto status = proc(model).Encode(std::string_view(text, size), &t_ids);
    if (!status.ok()) return failed(status, error, static_cast<const int*>(nullptr));
    *count = t_ids.size();
    return t_ids.data();
  });
}

bool train(const char* const* keys, const char* const* values, size_t count, const char** error) {
  return guarded(error, false, [&] {
    std::unordered_map<std::string, std::string> args;
    for (size_t i = 0; i < count; ++i) args[keys[i]] = values[i];
    const auto status = sentencepiece::SentencePieceTrainer::Train(args);
    return status.ok() ? true : failed(status, error, false);
  });
}

constexpr SpApi kApi = {kSpApiVersion, load, free_model, piece_count, piece_kind, piece, eos_id, bos_id, encode, train};

}  // namespace
}  // namespace llmtrain::tokenizer::detail

extern "C" __attribute__((visibility("default"))) const llmtrain::tokenizer::detail::SpApi*
llmtrain_sentencepiece_api() {
  return &llmtrain::tokenizer::detail::kApi;
}
