#include "llmtrain/tokenizer/tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "../core/json.h"
#include "llmtrain/core/error.h"
#include "llmtrain/tokenizer/gpt2_bpe.h"
#include "llmtrain/tokenizer/hf_tokenizer.h"
#include "llmtrain/tokenizer/sentencepiece.h"
#include "pieces.h"
#if LLMTRAIN_WITH_ICU
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>
#endif

namespace llmtrain::tokenizer {

size_t invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const size_t n = s.size();
  for (size_t i = 0; i < n;) {
    const unsigned c = p[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    int len;
    unsigned cp;
    if ((c & 0xE0) == 0xC0) {
      len = 2;
      cp = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      cp = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      cp = c & 0x07;
    } else return i;
    if (i + len > n) return i;
    for (int k = 1; k < len; ++k) {
      if ((p[i + k] & 0xC0) != 0x80) return i;
      cp = (cp << 6) | (p[i + k] & 0x3F);
    }
    const unsigned min_cp[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min_cp[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return i;
    i += len;
  }
  return std::string_view::npos;
}

size_t complete_utf8_prefix(std::string_view s) {
  // Back over at most 3 continuation bytes to the last lead byte; cut there if its character is short.
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  size_t i = s.size();
  for (int back = 0; back < 4 && i > 0; ++back) {
    const unsigned c = p[--i];
    if ((c & 0xC0) == 0x80) continue;
    const size_t len = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 1;
    return s.size() - i < len ? i : s.size();
  }
  return s.size();
}

std::string printable_utf8(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  while (!s.empty()) {
    const size_t bad = invalid_utf8_at(s);
    if (bad == std::string_view::npos) {
      out += s;
      break;
    }
    out += s.substr(0, bad);
    out += "\xEF\xBF\xBD";  // U+FFFD for the byte that breaks UTF-8
    s.remove_prefix(bad + 1);
  }
  return out;
}

std::vector<int32_t> parse_ids(std::string_view text, const std::string& what, int64_t limit) {
  const json::Json ids = json::parse(text, what);
  LLMTRAIN_CHECK(ids.is_array(), what, ": expected a JSON array of token ids, got ", json::excerpt(ids));
  std::vector<int32_t> out;
  out.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    const json::Json& id = ids[i];
    const bool ok = id.is_number_unsigned() && id.get<uint64_t>() < uint64_t(std::min<int64_t>(limit, INT32_MAX));
    LLMTRAIN_CHECK(ok, what, ": entry ", i, " is ", json::excerpt(id), ", not a token id in [0, ", limit, ")");
    out.push_back(int32_t(id.get<uint64_t>()));
  }
  return out;
}

namespace {

// The GPT-2 folder `path` names: itself, else $LLMTRAIN_GPT2_DIR, else $LLMTRAIN_DATA_DIR/gpt2.
std::string gpt2_dir(const std::string& path) {
  if (!path.empty()) return path;
  const char* gpt2 = std::getenv("LLMTRAIN_GPT2_DIR");
  const char* data = std::getenv("LLMTRAIN_DATA_DIR");
  const std::string dir = gpt2 && *gpt2 ? gpt2 : (data && *data ? std::string(data) + "/gpt2" : "");
  LLMTRAIN_CHECK(!dir.empty(), "GPT-2 tokenizer: no folder given; give one (tokenizer.path in a config, --vocab-dir ",
                 "to the programs that take it) or set LLMTRAIN_GPT2_DIR to a folder with encoder.json + vocab.bpe");
  return dir;
}

}  // namespace

std::vector<std::string> tokenizer_files(const std::string& kind, const std::string& path) {
  LLMTRAIN_CHECK(kind == "gpt2" || kind == "sentencepiece" || kind == "hf", "unknown tokenizer \"", kind,
                 "\"; expected gpt2, sentencepiece or hf");
  if (kind == "hf") {
    LLMTRAIN_CHECK(!path.empty(), "Hugging Face tokenizer: no folder given (one with tokenizer.json)");
    return HFTokenizer::files_in(path);
  }
  if (kind == "sentencepiece") {
    LLMTRAIN_CHECK(!path.empty(), "SentencePiece tokenizer: no .model file given");
    return {path};
  }
  const auto [vocab, merges] = GPT2BPE::files_in(gpt2_dir(path));
  return {vocab, merges};
}

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& kind, const std::string& path) {
  const auto files = tokenizer_files(kind, path);
  if (kind == "gpt2") return std::make_unique<GPT2BPE>(files[0], files[1]);
  if (kind == "hf") return std::make_unique<HFTokenizer>(files[0], files.size() > 1 ? files[1] : "");
  return std::make_unique<SentencePiece>(files[0]);
}

namespace detail {

#if LLMTRAIN_WITH_ICU
bool nfc_available() { return true; }
#else
bool nfc_available() { return false; }
#endif

std::string to_nfc(std::string_view text) {
  if (std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; }))
    return std::string(text);  // ASCII is its own NFC
#if LLMTRAIN_WITH_ICU
  LLMTRAIN_CHECK(text.size() < size_t(INT32_MAX), "NFC: a text of ", text.size(), " bytes; at most ", INT32_MAX,
                 " between special tokens");
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* nfc = icu::Normalizer2::getNFCInstance(status);
  LLMTRAIN_CHECK(U_SUCCESS(status), "NFC: ICU's normalizer is unavailable (", u_errorName(status), ")");
  const icu::StringPiece piece(text.data(), int32_t(text.size()));
  if (nfc->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return std::string(text);
  status = U_ZERO_ERROR;
  const icu::UnicodeString normal = nfc->normalize(icu::UnicodeString::fromUTF8(piece), status);
  LLMTRAIN_CHECK(U_SUCCESS(status), "NFC: ICU could not normalise the text (", u_errorName(status), ")");
  std::string out;
  normal.toUTF8String(out);
  return out;
#else
  LLMTRAIN_CHECK(false, "NFC: this build of llmtrain has no ICU");
  return {};
#endif
}

}  // namespace detail
}  // namespace llmtrain::tokenizer
