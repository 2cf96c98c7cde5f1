// GPT-2 BPE files: the input is a vocabulary (token -> id JSON) and a merge list, split at the first
// "\n---\n". A tokenizer that loads encodes and decodes back any text exactly.
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find("\n---\n");
  if (cut == std::string::npos) return 0;
  const std::string dir = fuzz::scratch() + "/bpe";
  llmtrain::fs::make_dirs(dir);
  llmtrain::fs::write_file_atomic(dir + "/vocab.json", in.substr(0, cut));
  llmtrain::fs::write_file_atomic(dir + "/merges.txt", in.substr(cut + 5));
  try {
    const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(dir);
    for (const std::string text : {"Hello world, hello again!", "aaaaaaaabbbbbbbb cccc", " \n\t 12 34"}) {
      const auto ids = tok->encode(text);
      fuzz::require(tok->decode(ids) == text);
    }
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
