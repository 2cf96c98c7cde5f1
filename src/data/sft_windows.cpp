#include "sft_windows.h"

#include <algorithm>

#include "jsonl.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/types.h"

namespace llmtrain::data::detail {
namespace {

constexpr int64_t kIgnore = kIgnoreIndex;

}  // namespace

SFTExamples read_sft_examples(const tokenizer::Tokenizer& tok, const SFTOptions& o) {
  SFTExamples w;
  const int64_t T = o.seq_len;
  LLMTRAIN_CHECK(T > 0 && T <= kMaxSeqLen, "SFT: seq_len must be in [1, ", kMaxSeqLen, "], got ", T);
  const auto eot = tok.eot_id();
  LLMTRAIN_CHECK(eot.has_value(), "SFT: the tokenizer has no end-of-text id to end examples with");
  LineReader in(o.path, "SFT");
  std::string line;
  while (in.next(line)) {
    const std::string where = o.path + ":" + std::to_string(in.line_no());
    const auto j = parse_object("SFT", line, where, o.skip_bad_lines, w.skipped_lines);
    if (!j) continue;
    std::vector<int32_t> prompt, completion;
    try {
      if (j->contains(o.prompt_field) || j->contains(o.completion_field)) {
        const auto p = string_field("SFT", *j, o.prompt_field, where, o.skip_bad_lines, w.skipped_lines);
        const auto c =
            p ? string_field("SFT", *j, o.completion_field, where, o.skip_bad_lines, w.skipped_lines) : std::nullopt;
        if (!c) continue;
        prompt = tok.encode(*p);
        completion = tok.encode(*c);
      } else {
        const auto t = string_field("SFT", *j, o.text_field, where, o.skip_bad_lines, w.skipped_lines);
        if (!t) continue;
        completion = tok.encode(*t);  // plain text: every token is trained on
      }
    } catch (const llmtrain::Error& e) {
      bad_line("SFT", where, e.what(), o.skip_bad_lines, w.skipped_lines);
      continue;
    }
    ++w.read;
    // tokens = prompt + completion + eot; target k is token k + 1, trained when that token is not prompt.
    std::vector<int64_t> tokens(prompt.begin(), prompt.end());
    tokens.insert(tokens.end(), completion.begin(), completion.end());
    tokens.push_back(*eot);
    if (int64_t(tokens.size()) > T + 1) {
      tokens.resize(size_t(T + 1));
      ++w.truncated;
    }
    SFTExample ex;
    for (size_t k = 0; k + 1 < tokens.size(); ++k) {
      ex.inputs.push_back(tokens[k]);
      ex.targets.push_back(k + 1 < prompt.size() ? kIgnore : tokens[k + 1]);
    }
    if (std::all_of(ex.targets.begin(), ex.targets.end(), [](int64_t t) { return t == kIgnore; })) {
      ++w.dropped;
      continue;
    }
    w.examples.push_back(std::move(ex));
  }
  LLMTRAIN_CHECK(!w.examples.empty(), "SFT: ", o.path, " holds no example with a completion token within seq_len ", T,
                 " (", w.read, " examples read, ", w.dropped, " dropped, ", w.skipped_lines, " lines skipped)");
  return w;
}

std::vector<SFTWindow> pack_sft_windows(const std::vector<int64_t>& lengths, const std::vector<int64_t>& order,
                                        int64_t seq_len, bool pack) {
  std::vector<SFTWindow> windows;
  int64_t used = seq_len;  // of the open window: none is open yet
  for (const int64_t i : order) {
    LLMTRAIN_CHECK(i >= 0 && size_t(i) < lengths.size(), "SFT: example ", i, " is outside [0, ", lengths.size(), ")");
    const int64_t n = lengths[size_t(i)];
    LLMTRAIN_CHECK(n >= 1 && n <= seq_len, "SFT: example ", i, " has ", n, " tokens, outside [1, seq_len ", seq_len,
                   "]");
    if (!pack || used + n > seq_len) {
      windows.emplace_back();
      used = 0;
    }
    windows.back().push_back(i);
    used += n;
  }
  return windows;
}

}  // namespace llmtrain::data::detail
