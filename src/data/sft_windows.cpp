#include "sft_windows.h"

#include <algorithm>

#include "jsonl.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/types.h"

namespace llmtrain::data::detail {
namespace {

constexpr int64_t kIgnore = kIgnoreIndex;
using json::Json;

// The messages of a chat line, or nullopt after bad_line: an array of objects with string role and content.
std::optional<std::vector<ChatMessage>> messages_of(const Json& v, const std::string& field, const std::string& where,
                                                    bool skip, int64_t& skipped) {
  std::vector<ChatMessage> out;
  std::string bad = v.is_array() ? "" : "\"" + field + "\" must be an array of messages";
  for (size_t i = 0; bad.empty() && i < v.size(); ++i) {
    const Json& m = v[i];
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
        !m["content"].is_string())
      bad = "message " + std::to_string(i) + " must be an object with string fields \"role\" and \"content\"";
    else out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  if (bad.empty()) return out;
  bad_line("SFT", where, bad, skip, skipped);
  return std::nullopt;
}

}  // namespace

SFTExamples read_sft_examples(const tokenizer::Tokenizer& tok, const SFTOptions& o) {
  SFTExamples w;
  const int64_t T = o.seq_len;
  LLMTRAIN_CHECK(T > 0 && T <= kMaxSeqLen, "SFT: seq_len must be in [1, ", kMaxSeqLen, "], got ", T);
  const auto eot = tok.eot_id();
  LLMTRAIN_CHECK(eot.has_value(), "SFT: the tokenizer has no end-of-text id to end examples with");
  const std::optional<int32_t> bos = o.add_bos ? tok.bos_id() : std::nullopt;
  ChatFormat chat = o.chat_format;  // resolved and checked at the first messages line
  bool chat_checked = false;
  LineReader in(o.path, "SFT");
  std::string line;
  while (in.next(line)) {
    const std::string where = o.path + ":" + std::to_string(in.line_no());
    const auto j = parse_object("SFT", line, where, o.skip_bad_lines, w.skipped_lines);
    if (!j) continue;
    // tokens[k] is trained[k]: the target of position k - 1.
    std::vector<int32_t> tokens;
    std::vector<bool> trained;
    if (j->contains(o.messages_field) && !chat_checked) {  // a mistake of the run's, not the line's: thrown
      if (chat == ChatFormat::kAuto) {
        LLMTRAIN_CHECK(!o.chat_dir.empty(), "SFT: ", where, ": a messages line, and no chat format to lay it out ",
                       "with: name one (data.chat_template: ", Choice<ChatFormat>::names(ChatFormat::kAuto), ")");
        chat = chat_format_in(o.chat_dir);
      }
      std::vector<int32_t> ids;  // every special token the format uses, or the error that names the missing one
      std::vector<bool> flags;
      encode_chat(tok, render_chat(chat, {{"system", "s"}, {"user", "u"}, {"assistant", "a"}}, true, where), ids,
                  flags);
      chat_checked = true;
    }
    try {
      if (j->contains(o.messages_field)) {
        const auto messages =
            messages_of((*j)[o.messages_field], o.messages_field, where, o.skip_bad_lines, w.skipped_lines);
        if (!messages) continue;
        encode_chat(tok, render_chat(chat, *messages, false, where), tokens, trained);
      } else {
        if (bos) {
          tokens.push_back(*bos);
          trained.push_back(false);
        }
        if (j->contains(o.prompt_field) || j->contains(o.completion_field)) {
          const auto p = string_field("SFT", *j, o.prompt_field, where, o.skip_bad_lines, w.skipped_lines);
          const auto c =
              p ? string_field("SFT", *j, o.completion_field, where, o.skip_bad_lines, w.skipped_lines) : std::nullopt;
          if (!c) continue;
          const auto prompt = tok.encode(*p);
          tokens.insert(tokens.end(), prompt.begin(), prompt.end());
          trained.insert(trained.end(), prompt.size(), false);
          const auto completion = tok.encode(*c);
          tokens.insert(tokens.end(), completion.begin(), completion.end());
        } else {
          const auto t = string_field("SFT", *j, o.text_field, where, o.skip_bad_lines, w.skipped_lines);
          if (!t) continue;
          const auto text = tok.encode(*t);  // plain text: every token is trained on
          tokens.insert(tokens.end(), text.begin(), text.end());
        }
        tokens.push_back(*eot);
        trained.resize(tokens.size(), true);
      }
    } catch (const llmtrain::Error& e) {
      bad_line("SFT", where, e.what(), o.skip_bad_lines, w.skipped_lines);
      continue;
    }
    ++w.read;
    if (int64_t(tokens.size()) > T + 1) {
      tokens.resize(size_t(T + 1));
      ++w.truncated;
    }
    SFTExample ex;
    for (size_t k = 0; k + 1 < tokens.size(); ++k) {
      ex.inputs.push_back(tokens[k]);
      ex.targets.push_back(trained[k + 1] ? tokens[k + 1] : kIgnore);
    }
    if (std::all_of(ex.targets.begin(), ex.targets.end(), [](int64_t t) { return t == kIgnore; })) {
      ++w.dropped;
      continue;
    }
    w.examples.push_back(std::move(ex));
  }
  w.chat_format = chat;
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
