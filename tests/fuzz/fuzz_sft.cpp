// SFT JSONL read into examples (prompt/completion or text lines), skipping bad lines or not, then laid
// into windows, packed or not, in a shuffled order: as its first byte says.
#include <algorithm>
#include <numeric>

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
    const auto w = llmtrain::data::detail::read_sft_examples(fuzz::small_tokenizer(), o);
    fuzz::require(!w.examples.empty());
    std::vector<int64_t> lengths, order(w.examples.size());
    for (const auto& ex : w.examples) {
      fuzz::require(!ex.inputs.empty() && ex.inputs.size() == ex.targets.size() &&
                    int64_t(ex.inputs.size()) <= o.seq_len);
      lengths.push_back(int64_t(ex.inputs.size()));
    }
    std::iota(order.rbegin(), order.rend(), 0);
    const auto windows = llmtrain::data::detail::pack_sft_windows(lengths, order, o.seq_len, o.pack);
    size_t seen = 0;
    for (const auto& window : windows) {
      int64_t used = 0;
      for (const int64_t i : window) used += lengths[size_t(i)];
      fuzz::require(!window.empty() && used <= o.seq_len && (o.pack || window.size() == 1));
      seen += window.size();
    }
    fuzz::require(seen == order.size());
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
