// A Hugging Face GPT-2 config.json.
#include "../../src/io/hf_config.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto cfg =
        llmtrain::io::detail::parse_hf_gpt2_config({reinterpret_cast<const char*>(data), size}, "config.json");
    fuzz::require(cfg.stored_parameters() > 0);
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
