// SFT JSONL read into windows (prompt/completion or text lines), packed or not, skipping bad lines or
// not, as its first byte says.
#include "../../src/data/sft_windows.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  llmtrain::data::SFTOptions o;
  o.path = fuzz::file("train.jsonl", data + 1, size - 1);
  o.seq_len = 1 + data[0] % 32;
  o.pack = data[0] & 0x40;
  o.skip_bad_lines = data[0] & 0x80;
  try {
    const auto w = llmtrain::data::detail::read_sft_windows(fuzz::small_tokenizer(), o);
    fuzz::require(!w.inputs.empty() && w.inputs.size() == w.targets.size());
    for (size_t i = 0; i < w.inputs.size(); ++i)
      fuzz::require(int64_t(w.inputs[i].size()) == o.seq_len && int64_t(w.targets[i].size()) == o.seq_len);
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
