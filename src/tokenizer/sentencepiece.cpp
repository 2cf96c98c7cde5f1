// SentencePiece through sp_module.h's table: libsentencepiece lives in a module of its own, opened
// in a link-map namespace of its own on first use (see sp_module.h for why), or linked in where LibTorch
// is not (LLMTRAIN_SENTENCEPIECE_LINKED, the fuzzers).
#include "llmtrain/tokenizer/sentencepiece.h"

#include <dlfcn.h>
#include <unistd.h>

#include <mutex>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "pieces.h"
#include "sp_module.h"

namespace llmtrain::tokenizer {
namespace detail {

const SpApi& sp_api() {
#ifdef LLMTRAIN_SENTENCEPIECE_LINKED
  return *llmtrain_sentencepiece_api();
#else
  static std::once_flag once;
  static const SpApi* api = nullptr;
  static std::string error;
  std::call_once(once, [] {
    // The module lies beside the library that holds this function (build/lib, or the install's lib).
    Dl_info self{};
    std::string path = "libllmtrain_sentencepiece.so";
    if (::dladdr(reinterpret_cast<void*>(&sp_api), &self) && self.dli_fname) {
      const std::string lib = self.dli_fname;
      const size_t slash = lib.rfind('/');
      if (slash != std::string::npos) path = lib.substr(0, slash + 1) + path;
    }
    void* handle = ::dlmopen(LM_ID_NEWLM, path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      error = std::string("cannot open ") + path + ": " + ::dlerror();
      return;
    }
    const auto entry = reinterpret_cast<const SpApi* (*)()>(::dlsym(handle, "llmtrain_sentencepiece_api"));
    if (!entry || entry()->version != kSpApiVersion) {
      error = path + " is not the SentencePiece module of this llmtrain build (rebuild it)";
      return;
    }
    api = entry();
  });
  LLMTRAIN_CHECK(api != nullptr, "SentencePiece: ", error);
  return *api;
#endif
}

}  // namespace detail

namespace {

// The most a .model file may hold: Llama's is 0.5 MB, the largest published ones a few MB.
constexpr uint64_t kMaxModelBytes = uint64_t(256) << 20;

// A byte-fallback piece's byte: "<0xE2>" -> 0xE2; -1 when the text is not of that form.
int byte_of_piece(const std::string& piece) {
  if (piece.size() != 6 || piece.compare(0, 3, "<0x") != 0 || piece[5] != '>') return -1;
  int value = 0;
  for (const char c : piece.substr(3, 2)) {
    const int digit = c >= '0' && c <= '9'   ? c - '0'
                      : c >= 'A' && c <= 'F' ? c - 'A' + 10
                      : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                             : -1;
    if (digit < 0) return -1;
    value = value * 16 + digit;
  }
  return value;
}

}  // namespace

struct SentencePiece::Impl {
  const detail::SpApi* api = nullptr;
  void* model = nullptr;
  std::vector<std::string> bytes_of;  // id -> the bytes it decodes to ("" for control pieces)
  bool dummy_prefix = false;          // the model prepends a space to every text it encodes
  std::optional<int32_t> eos, bos;
  std::string eos_text, bos_text;         // their pieces' texts ("</s>", "<s>")
  std::vector<detail::Special> specials;  // those of the two it has, for allow_special (views of the texts)
  ~Impl() {
    if (model) api->free(model);
  }
};

SentencePiece::SentencePiece(const std::string& model_path)
    : SentencePiece(model_path, fs::read_file(model_path, kMaxModelBytes, "SentencePiece model")) {}

SentencePiece::SentencePiece(const std::string& name, const std::string& model_bytes)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.api = &detail::sp_api();
  const char* error = "";
  d.model = d.api->load(model_bytes.data(), model_bytes.size(), &error);
  LLMTRAIN_CHECK(d.model != nullptr, "SentencePiece model ", name, " could not be loaded: ", error);
  const int n = d.api->piece_count(d.model);
  LLMTRAIN_CHECK(n > 0, "SentencePiece model ", name, " has no pieces");
  d.bytes_of.resize(size_t(n));
  const auto piece_of = [&d](int id) {
    size_t size = 0;
    const char* p = d.api->piece(d.model, id, &size);
    return std::string(p, size);
  };
  for (int id = 0; id < n; ++id) {
    const auto kind = d.api->piece_kind(d.model, id);
    if (kind == detail::SpPieceKind::kControl) continue;
    std::string piece = piece_of(id);
    if (kind == detail::SpPieceKind::kByte) {
      const int byte = byte_of_piece(piece);
      LLMTRAIN_CHECK(byte >= 0, "SentencePiece model ", name, ": byte piece ", id, " is \"", piece,
                     "\", expected <0xHH>");
      d.bytes_of[size_t(id)] = std::string(1, static_cast<char>(byte));
      continue;
    }
    if (kind == detail::SpPieceKind::kUnknown) piece = " \xE2\x81\x87 ";  // what SentencePiece prints for <unk>
    std::string text;
    for (size_t i = 0; i < piece.size();) {  // "▁" (U+2581) stands for a space
      if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {
        text += ' ';
        i += 3;
      } else {
        text += piece[i++];
      }
    }
    d.bytes_of[size_t(id)] = text;
  }
  size_t count = 0;
  const int* probe = d.api->encode(d.model, "a", 1, &count, &error);
  if (probe && count > 0 && probe[0] >= 0 && probe[0] < n)
    d.dummy_prefix = !d.bytes_of[size_t(probe[0])].empty() && d.bytes_of[size_t(probe[0])][0] == ' ';
  if (const int eos = d.api->eos_id(d.model); eos >= 0 && eos < n) {
    d.eos = eos;
    d.eos_text = piece_of(eos);
  }
  if (const int bos = d.api->bos_id(d.model); bos >= 0 && bos < n) {
    d.bos = bos;
    d.bos_text = piece_of(bos);
  }
  if (d.eos) d.specials.push_back({d.eos_text, *d.eos});
  if (d.bos) d.specials.push_back({d.bos_text, *d.bos});
}

SentencePiece::~SentencePiece() = default;

std::vector<int32_t> SentencePiece::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  const auto plain = [&](std::string_view part, std::vector<int32_t>& o) {
    size_t count = 0;
    const char* error = "";
    const int* ids = impl_->api->encode(impl_->model, part.data(), part.size(), &count, &error);
    LLMTRAIN_CHECK(ids != nullptr, "SentencePiece::encode: ", error);
    o.insert(o.end(), ids, ids + count);
  };
  if (!allow_special || impl_->specials.empty()) plain(text, out);
  else detail::encode_with_special(text, impl_->specials, plain, out);
  return out;
}

std::string SentencePiece::decode(const std::vector<int32_t>& ids) const {
  std::string out = detail::join_pieces(impl_->bytes_of, ids, "SentencePiece");
  if (impl_->dummy_prefix && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

int64_t SentencePiece::vocab_size() const { return int64_t(impl_->bytes_of.size()); }

std::optional<int32_t> SentencePiece::eot_id() const { return impl_->eos; }
std::optional<int32_t> SentencePiece::bos_id() const { return impl_->bos; }
std::optional<std::string> SentencePiece::bos_text() const {
  return impl_->bos ? std::optional<std::string>(impl_->bos_text) : std::nullopt;
}
std::optional<std::string> SentencePiece::eot_text() const {
  return impl_->eos ? std::optional<std::string>(impl_->eos_text) : std::nullopt;
}

void train_sentencepiece(const SentencePieceTrainOptions& o) {
  LLMTRAIN_CHECK(!o.inputs.empty(), "train_sentencepiece: no input files");
  for (const auto& in : o.inputs) {
    uint64_t size = 0;
    ::close(fs::open_regular(in, &size, "train_sentencepiece: input"));
  }
  LLMTRAIN_CHECK(!o.model_prefix.empty(), "train_sentencepiece: model_prefix is empty");
  LLMTRAIN_CHECK(o.model_type == "bpe" || o.model_type == "unigram", "train_sentencepiece: model_type \"", o.model_type,
                 "\" is neither bpe nor unigram");
  LLMTRAIN_CHECK(o.vocab_size >= 16 && o.vocab_size <= (int64_t(1) << 24), "train_sentencepiece: vocab_size ",
                 o.vocab_size, " is outside [16, 2^24]");
  LLMTRAIN_CHECK(o.max_sentences >= 0, "train_sentencepiece: max_sentences ", o.max_sentences, " is negative");
  LLMTRAIN_CHECK(o.max_line_bytes >= 1 && o.max_line_bytes <= (int64_t(1) << 30),
                 "train_sentencepiece: max_line_bytes ", o.max_line_bytes, " is outside [1, 2^30]");
  LLMTRAIN_CHECK(o.character_coverage > 0 && o.character_coverage <= 1, "train_sentencepiece: character_coverage ",
                 o.character_coverage, " is outside (0, 1]");
  std::string inputs;
  for (const auto& in : o.inputs) {
    LLMTRAIN_CHECK(in.find(',') == std::string::npos, "train_sentencepiece: input ", in,
                   " has a comma in its name, which SentencePiece reads as a list separator");
    inputs += (inputs.empty() ? "" : ",") + in;
  }
  for (const char* ext : {".model", ".vocab"})
    LLMTRAIN_CHECK(o.force || !fs::exists(o.model_prefix + ext), "train_sentencepiece: ", o.model_prefix, ext,
                   " exists: choose another prefix, or pass --force to replace it");
  // SentencePiece writes <prefix>.model and .vocab itself, in place: it writes them into a temporary
  // folder, from which each is written beside its output and renamed over it, the model last.
  const size_t slash = o.model_prefix.rfind('/');
  if (slash != std::string::npos && slash > 0) fs::make_dirs(o.model_prefix.substr(0, slash));
  const std::string tmp = fs::make_temp_dir("llmtrain_sp_");
  const std::string tmp_prefix = tmp + "/sp";
  std::vector<std::pair<std::string, std::string>> args = {{"input", inputs},
                                                           {"model_prefix", tmp_prefix},
                                                           {"model_type", o.model_type},
                                                           {"vocab_size", std::to_string(o.vocab_size)},
                                                           {"character_coverage", std::to_string(o.character_coverage)},
                                                           {"byte_fallback", o.byte_fallback ? "true" : "false"},
                                                           {"max_sentence_length", std::to_string(o.max_line_bytes)},
                                                           {"minloglevel", "1"}};
  if (o.keep_whitespace) {  // chat formats and code keep their lines and indentation
    args.emplace_back("normalization_rule_name", "identity");
    args.emplace_back("remove_extra_whitespaces", "false");
  }
  if (o.max_sentences > 0) {
    args.emplace_back("input_sentence_size", std::to_string(o.max_sentences));
    args.emplace_back("shuffle_input_sentence", "true");
  }
  try {
    std::vector<const char*> keys, values;
    for (const auto& [k, v] : args) {
      keys.push_back(k.c_str());
      values.push_back(v.c_str());
    }
    const char* error_text = "";
    const bool ok = detail::sp_api().train(keys.data(), values.data(), args.size(), &error_text);
    const std::string error = error_text;
    LLMTRAIN_CHECK(ok, "train_sentencepiece: ", error,
                   error.find("sentences_.empty()") != std::string::npos
                       ? " (no usable lines: every line was empty or longer than max_line_bytes)"
                       : "");
    for (const char* ext : {".vocab", ".model"})
      fs::write_file_atomic(o.model_prefix + ext, fs::read_file(tmp_prefix + ext));
  } catch (...) {
    fs::remove_tree(tmp);
    throw;
  }
  fs::remove_tree(tmp);
}

}  // namespace llmtrain::tokenizer
