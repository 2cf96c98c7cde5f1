// tokenize --decode's input: a JSON list of ids, checked against the vocabulary, then decoded.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = fuzz::small_tokenizer();
  try {
    const auto ids =
        llmtrain::tokenizer::parse_ids({reinterpret_cast<const char*>(data), size}, "stdin", tok.vocab_size());
    for (const int32_t id : ids) fuzz::require(id >= 0 && id < tok.vocab_size());
    tok.decode(ids);
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
