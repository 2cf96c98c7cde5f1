// A Hugging Face config.json, read as GPT-2's and as the Llama family's.
#include "../../src/io/hf_config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const auto cfg = llmtrain::io::detail::parse_hf_gpt2_config(text, "config.json");
    fuzz::require(cfg.stored_parameters() > 0);
  } catch (const llmtrain::Error&) {
  }
  try {
    const auto cfg = llmtrain::io::detail::parse_hf_llama_config(text, "config.json");
    fuzz::require(cfg.num_parameters() > 0);
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
