#include "llmtrain/tokenizer/tokenizer.h"

#include <algorithm>
#include <climits>
#include <cstdlib>

#include "../core/json.h"
#include "llmtrain/core/error.h"
#include "llmtrain/tokenizer/gpt2_bpe.h"
#include "llmtrain/tokenizer/sentencepiece.h"

namespace llmtrain::tokenizer {

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

std::unique_ptr<Tokenizer> load_tokenizer(const std::string& kind, const std::string& path) {
  if (kind == "gpt2") {
    std::string dir = path;
    if (dir.empty()) {
      const char* gpt2 = std::getenv("LLMTRAIN_GPT2_DIR");
      const char* data = std::getenv("LLMTRAIN_DATA_DIR");
      dir = gpt2 && *gpt2 ? gpt2 : (data && *data ? std::string(data) + "/gpt2" : "");
    }
    LLMTRAIN_CHECK(!dir.empty(), "GPT-2 tokenizer: no folder given; pass one (--vocab-dir) or set "
                                 "LLMTRAIN_GPT2_DIR to a folder with encoder.json + vocab.bpe");
    return GPT2BPE::from_dir(dir);
  }
  if (kind == "sentencepiece") {
    LLMTRAIN_CHECK(!path.empty(), "SentencePiece tokenizer: no .model file given");
    return std::make_unique<SentencePiece>(path);
  }
  LLMTRAIN_CHECK(false, "unknown tokenizer \"", kind, "\"; expected gpt2 or sentencepiece");
  return nullptr;
}

}  // namespace llmtrain::tokenizer
