// A training config (TrainerConfig::parse): JSON of any shape, and a --set override on its first line.
#include "fuzz_util.h"
#include "llmtrain/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size), override_line;
  if (const size_t nl = text.find('\n'); nl != std::string::npos && text.compare(0, 6, "--set ") == 0) {
    override_line = text.substr(6, nl - 6);
    text = text.substr(nl + 1);
  }
  try {
    const auto cfg = llmtrain::train::TrainerConfig::parse(
        text, "fuzz.json",
        override_line.empty() ? std::vector<std::string>{} : std::vector<std::string>{override_line});
    // What parses writes back as JSON that parses to the same config.
    fuzz::require(llmtrain::train::TrainerConfig::parse(cfg.to_json(), "round trip").to_json() == cfg.to_json());
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
