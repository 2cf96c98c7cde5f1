// A checkpoint's state.json, then the run config it holds.
#include "../../src/train/checkpoint_state.h"
#include "fuzz_util.h"
#include "llmtrain/train/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const auto state =
        llmtrain::train::detail::CheckpointState::parse({reinterpret_cast<const char*>(data), size}, "state.json");
    const auto again = llmtrain::train::detail::CheckpointState::parse(state.to_json(), "round trip");
    fuzz::require(again.to_json() == state.to_json());
    llmtrain::train::TrainerConfig::parse(state.config, "state.json's config");
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
