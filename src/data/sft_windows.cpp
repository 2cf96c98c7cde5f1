#include "sft_windows.h"

#include <algorithm>

#include "jsonl.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/types.h"

namespace llmtrain::data::detail {
namespace {

constexpr int64_t kIgnore = kIgnoreIndex;

struct Example {
  std::vector<int64_t> inputs, targets;  // (L) each, targets already masked
};

}  // namespace

SFTWindows read_sft_windows(const tokenizer::Tokenizer& tok, const SFTOptions& o) {
  SFTWindows w;
  const int64_t T = o.seq_len;
  LLMTRAIN_CHECK(T > 0 && T <= kMaxSeqLen, "SFT: seq_len must be in [1, ", kMaxSeqLen, "], got ", T);
  const auto eot = tok.eot_id();
  LLMTRAIN_CHECK(eot.has_value(), "SFT: the tokenizer has no end-of-text id to end examples with");
  LineReader in(o.path, "SFT");
  std::vector<Example> examples;
  std::string line;
  while (in.next(line)) {
    const std::string where = o.path + ":" + std::to_string(in.line_no());
    const auto j = parse_object("SFT", line, where, o.skip_bad_lines, w.skipped_lines);
    if (!j) continue;
    std::vector<int32_t> prompt, completion;
    try {
      if (j->contains(o.prompt_field) || j->contains(o.completion_field)) {
        const auto p = string_field("SFT", *j, o.prompt_field, where, o.skip_bad_lines, w.skipped_lines);
        const auto c = p ? string_field("SFT", *j, o.completion_field, where, o.skip_bad_lines, w.skipped_lines)
                         : std::nullopt;
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
    ++w.examples;
    // tokens = prompt + completion + eot; target k is token k + 1, trained when that token is not prompt.
    std::vector<int64_t> tokens(prompt.begin(), prompt.end());
    tokens.insert(tokens.end(), completion.begin(), completion.end());
    tokens.push_back(*eot);
    if (int64_t(tokens.size()) > T + 1) {
      tokens.resize(size_t(T + 1));
      ++w.truncated;
    }
    Example ex;
    for (size_t k = 0; k + 1 < tokens.size(); ++k) {
      ex.inputs.push_back(tokens[k]);
      ex.targets.push_back(k + 1 < prompt.size() ? kIgnore : tokens[k + 1]);
    }
    if (std::all_of(ex.targets.begin(), ex.targets.end(), [](int64_t t) { return t == kIgnore; })) {
      ++w.dropped;
      continue;
    }
    examples.push_back(std::move(ex));
  }
  LLMTRAIN_CHECK(!examples.empty(), "SFT: ", o.path, " holds no example with a completion token within seq_len ", T,
                 " (", w.examples, " examples read, ", w.dropped, " dropped, ", w.skipped_lines, " lines skipped)");

  // Lay examples into windows; padding has input end-of-text and target -100.
  std::vector<int64_t> in_w, tg_w;
  const auto close_window = [&] {
    if (in_w.empty()) return;
    in_w.resize(size_t(T), *eot);
    tg_w.resize(size_t(T), kIgnore);
    w.inputs.push_back(std::move(in_w));
    w.targets.push_back(std::move(tg_w));
    in_w.clear();
    tg_w.clear();
  };
  for (const auto& ex : examples) {
    if (!o.pack || int64_t(in_w.size() + ex.inputs.size()) > T) close_window();
    in_w.insert(in_w.end(), ex.inputs.begin(), ex.inputs.end());
    tg_w.insert(tg_w.end(), ex.targets.begin(), ex.targets.end());
  }
  close_window();
  return w;
}

}  // namespace llmtrain::data::detail
