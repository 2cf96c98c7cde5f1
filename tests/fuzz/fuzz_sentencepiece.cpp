// A SentencePiece .model file's bytes. A model that loads encodes and decodes text.
#include "fuzz_util.h"
#include "llmtrain/tokenizer/sentencepiece.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const llmtrain::tokenizer::SentencePiece sp("fuzz.model", std::string(reinterpret_cast<const char*>(data), size));
    const auto ids = sp.encode("Hello world, hello again! \xc3\xa9\xe4\xb8\xad");
    for (const int32_t id : ids) fuzz::require(id >= 0 && id < sp.vocab_size());
    sp.decode(ids);
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
