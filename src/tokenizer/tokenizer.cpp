#include "llmtrain/tokenizer/tokenizer.h"

#include <cstdlib>

#include "llmtrain/core/error.h"
#include "llmtrain/tokenizer/gpt2_bpe.h"
#include "llmtrain/tokenizer/sentencepiece.h"

namespace llmtrain::tokenizer {

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
