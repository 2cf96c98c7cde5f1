// The data side of evaluation (no tensors here): reading and tokenizing the tasks' files, the
// sliding windows, and turning summed tallies into scores with their standard errors.
#include "llmtrain/eval/tasks.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "../core/json.h"
#include "../core/strings.h"
#include "../data/jsonl.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/data/shard.h"
#include "llmtrain/nn/causal_lm.h"
#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::eval {
namespace {

using data::detail::bad_line;
using json::Json;
using llmtrain::detail::ends_with;

constexpr int64_t kDefaultBatch = 16;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Characters (code points) of UTF-8 text: the bytes that start one.
int64_t characters(const std::string& s) {
  return std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; });
}

// A label: an integer, or a string of digits (as some copies of HellaSwag write it); -1 when neither.
int64_t label_of(const Json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) {
    const auto s = v.get<std::string>();
    if (!s.empty() && s.size() < 10 && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return std::stoll(s);
  }
  return -1;
}

// The mean of n values that are 0 or 1 summing to k, and its sample standard error.
Score proportion(const char* name, double k, double n) {
  const double p = n > 0 ? k / n : kNaN;
  return {name, p, n > 1 ? std::sqrt(p * (1 - p) / (n - 1)) : kNaN};
}

}  // namespace

std::string TaskConfig::name() const {
  if (task == "choice" && !data.empty()) {
    const size_t slash = data[0].rfind('/');
    return "choice:" + data[0].substr(slash == std::string::npos ? 0 : slash + 1);
  }
  return task;
}

std::string TaskResult::json() const {
  Json j{{"task", task}, {"name", name}};
  const auto num = [](double v) { return std::isfinite(v) ? Json(v) : Json(); };  // NaN: null
  for (const auto& s : scores) {
    j[s.name] = num(s.value);
    j[s.name + "_stderr"] = num(s.stderr_);
  }
  for (const auto& [k, v] : counts) j[k] = v;
  j["seconds"] = seconds;
  return j.dump();
}

std::string TaskResult::line() const {
  std::string out = name + ":";
  char buf[96];
  for (const auto& s : scores) {
    std::snprintf(buf, sizeof buf, " %s %.4f", s.name.c_str(), s.value);
    out += buf;
    if (std::isfinite(s.stderr_)) {
      std::snprintf(buf, sizeof buf, " ± %.4f", s.stderr_);
      out += buf;
    }
  }
  out += " (";
  for (const auto& [k, v] : counts) out += std::to_string(v) + " " + k + ", ";
  std::snprintf(buf, sizeof buf, "%.1f s)", seconds);
  return out + buf;
}

std::vector<ChoiceExample> read_choice_examples(const std::string& path, bool hellaswag,
                                                const tokenizer::Tokenizer& tok, std::optional<int32_t> start_id,
                                                int64_t block_size, int64_t limit, bool skip_bad, int64_t* skipped) {
  const char* who = hellaswag ? "hellaswag" : "choice";
  const char* ctx_key = hellaswag ? "ctx" : "context";
  const char* choices_key = hellaswag ? "endings" : "choices";
  const std::optional<int32_t> empty_context = start_id ? start_id : tok.eot_id();
  int64_t skip = 0;
  std::vector<ChoiceExample> out;
  data::detail::LineReader in(path, who);
  std::string line;
  while ((limit <= 0 || int64_t(out.size()) < limit) && in.next(line)) {
    const std::string where = path + ":" + std::to_string(in.line_no());
    const auto j = data::detail::parse_object(who, line, where, skip_bad, skip);
    if (!j) continue;
    const auto context = data::detail::string_field(who, *j, ctx_key, where, skip_bad, skip);
    if (!context) continue;
    const auto bad = [&](const std::string& what) { bad_line(who, where, what, skip_bad, skip); };
    if (!j->contains(choices_key) || !(*j)[choices_key].is_array() || (*j)[choices_key].size() < 2 ||
        !std::all_of((*j)[choices_key].begin(), (*j)[choices_key].end(), [](const Json& c) { return c.is_string(); })) {
      bad(std::string("expected \"") + choices_key + "\", a list of two or more strings");
      continue;
    }
    const Json& choices = (*j)[choices_key];
    const int64_t label = j->contains("label") ? label_of((*j)["label"]) : -1;
    if (label < 0 || label >= int64_t(choices.size())) {
      bad("expected \"label\", an index into the " + std::to_string(choices.size()) + " choices, got " +
          (j->contains("label") ? json::excerpt((*j)["label"]) : std::string("none")));
      continue;
    }
    // Trailing whitespace of the context belongs to the continuation (lm-evaluation-harness's rule).
    std::string ctx = *context;
    const size_t keep = ctx.find_last_not_of(" \t\n\r\v\f");
    const std::string moved = ctx.substr(keep == std::string::npos ? 0 : keep + 1);
    ctx.resize(ctx.size() - moved.size());
    const auto ctx_ids = tok.encode(ctx);
    ChoiceExample ex;
    ex.label = label;
    ex.line = in.line_no();
    int64_t longest = 0;
    bool ok = true;
    for (const auto& c : choices) {
      const std::string choice = c.get<std::string>();
      const std::string cont = moved + (hellaswag ? " " : "") + choice;
      auto whole = tok.encode(ctx + cont);
      if (choice.empty() || whole.size() <= ctx_ids.size()) {
        ok = false;
        break;
      }
      ex.choices.emplace_back(whole.begin() + int64_t(ctx_ids.size()), whole.end());
      ex.choice_chars.push_back(characters(choice));
      longest = std::max(longest, int64_t(ex.choices.back().size()));
    }
    if (!ok) {
      bad("a choice is empty (no ids after the context's)");
      continue;
    }
    // The context starts with the start id; an empty one is that id alone, or the end-of-text. A
    // context too long for the window loses ids on its left (after the start id): the model sees
    // context + choice but its last id.
    const int64_t room = block_size + 1 - longest;  // ids the context may keep
    const int64_t fixed = start_id || ctx_ids.empty() ? 1 : 0;
    if (ctx_ids.empty() && !empty_context) {
      bad("an empty context, and the tokenizer has no start or end-of-text id to stand for it");
      continue;
    }
    if (room < std::max<int64_t>(1, fixed + (ctx_ids.empty() ? 0 : 1))) {
      bad("a choice of " + std::to_string(longest) + " ids does not fit the model's window of " +
          std::to_string(block_size) + " with its context");
      continue;
    }
    if (fixed) ex.context.push_back(ctx_ids.empty() ? *empty_context : *start_id);
    const int64_t kept = std::min<int64_t>(int64_t(ctx_ids.size()), room - fixed);
    ex.truncated = kept < int64_t(ctx_ids.size());
    ex.context.insert(ex.context.end(), ctx_ids.end() - kept, ctx_ids.end());
    out.push_back(std::move(ex));
  }
  LLMTRAIN_CHECK(!out.empty(), who, ": ", path, ": no examples",
                 skip > 0 ? " (" + std::to_string(skip) + " lines skipped)" : std::string());
  if (skipped) *skipped = skip;
  return out;
}

std::vector<Document> read_documents(const std::vector<std::string>& files, const tokenizer::Tokenizer& tok,
                                     std::optional<int32_t> start_id) {
  LLMTRAIN_CHECK(!files.empty(), "perplexity: no data files");
  const std::optional<int32_t> start = start_id ? start_id : tok.eot_id();
  std::vector<Document> out;
  for (const auto& f : files) {
    Document d;
    if (ends_with(f, ".bin")) {
      const data::Shard shard(f);
      std::vector<int64_t> ids(size_t(shard.num_tokens()));
      shard.read(0, shard.num_tokens(), ids.data());
      for (int64_t id : ids) {
        LLMTRAIN_CHECK(id < tok.vocab_size(), "perplexity: ", f, ": id ", id, " is outside the tokenizer's ",
                       tok.vocab_size(), " ids");
        d.ids.push_back(int32_t(id));
      }
      // The bytes of the scored ids' text: all but the first (never scored), end-of-text ids standing for none.
      std::vector<int32_t> text;
      for (size_t i = 1; i < d.ids.size(); ++i)
        if (d.ids[i] != tok.eot_id()) text.push_back(d.ids[i]);
      d.bytes = int64_t(tok.decode(text).size());
    } else {
      const std::string text = fs::read_file(f);
      LLMTRAIN_CHECK(!text.empty(), "perplexity: ", f, " is empty");
      if (start) d.ids.push_back(*start);
      const auto ids = tok.encode(text);
      d.ids.insert(d.ids.end(), ids.begin(), ids.end());
      d.bytes = start ? int64_t(text.size())
                      : int64_t(tok.decode(std::vector<int32_t>(d.ids.begin() + 1, d.ids.end())).size());
    }
    LLMTRAIN_CHECK(d.ids.size() >= 2, "perplexity: ", f, " holds fewer than two ids: nothing to score");
    out.push_back(std::move(d));
  }
  return out;
}

std::vector<Window> sliding_windows(int64_t length, int64_t window, int64_t stride) {
  LLMTRAIN_CHECK(stride >= 1 && stride <= window, "perplexity: stride must be within [1, window = ", window, "], got ",
                 stride);
  std::vector<Window> out;
  int64_t prev_end = 0;
  for (int64_t begin = 0; begin < length; begin += stride) {
    const int64_t end = std::min(begin + window, length);
    // The ids the windows before did not score; a window's first id has no context in it.
    const int64_t scored = std::min(end - prev_end, end - begin - 1);
    if (scored > 0) out.push_back({begin, end, scored});
    prev_end = end;
    if (end == length) break;
  }
  return out;
}

Task::Task(TaskConfig config, const tokenizer::Tokenizer& tok, std::optional<int32_t> start_id, int64_t block_size)
    : config_(std::move(config)), block_size_(block_size) {
  TaskConfig& c = config_;
  const std::string what = "evaluation task " + c.name();
  LLMTRAIN_CHECK(c.task == "hellaswag" || c.task == "choice" || c.task == "perplexity", what,
                 ": task must be hellaswag, choice or perplexity, got \"", c.task, "\"");
  LLMTRAIN_CHECK(c.limit >= 0 && c.batch >= 0 && c.window >= 0 && c.stride >= 0, what,
                 ": limit, batch, window and stride must not be negative");
  if (c.batch == 0) c.batch = kDefaultBatch;
  if (c.task == "perplexity") {
    if (c.window == 0) c.window = block_size;
    if (c.stride == 0) c.stride = std::max<int64_t>(1, c.window / 2);
    LLMTRAIN_CHECK(c.window >= 2 && c.window <= block_size, what, ": window must be within [2, ", block_size,
                   "] (the model's block size), got ", c.window);
    sliding_windows(0, c.window, c.stride);  // checks the stride
    docs_ = read_documents(c.data, tok, start_id);
  } else {
    LLMTRAIN_CHECK(c.data.size() == 1, what, ": give one JSONL file, got ", c.data.size());
    examples_ = read_choice_examples(c.data[0], c.task == "hellaswag", tok, start_id, block_size, c.limit, c.skip_bad,
                                     &skipped_);
  }
}

Task::Tally Task::run(nn::CausalLM& model, int rank, int world,
                      const std::function<void(int64_t, int64_t)>& progress) const {
  LLMTRAIN_CHECK(model.block_size() >= block_size_, "evaluation task ", config_.name(), ": read for a window of ",
                 block_size_, " ids, the model has ", model.block_size());
  if (config_.task == "perplexity") {
    const NllSums s =
        score_perplexity(model, docs_, config_.window, config_.stride, config_.batch, rank, world, progress);
    return {s.tokens, s.nll, s.nll_sq};
  }
  // Every world-th example from rank's, in batches, so that progress can be told as they finish.
  std::vector<size_t> mine;
  for (size_t i = size_t(rank); i < examples_.size(); i += size_t(world)) mine.push_back(i);
  Tally t(5, 0.0);  // examples, right by acc, by acc_norm, by acc_token; truncated
  for (size_t first = 0; first < mine.size(); first += size_t(config_.batch)) {
    std::vector<ChoiceExample> part;
    for (size_t i = first; i < std::min(mine.size(), first + size_t(config_.batch)); ++i)
      part.push_back(examples_[mine[i]]);
    const ChoiceScores s = score_choices(model, part, config_.batch);
    for (size_t i = 0; i < part.size(); ++i) {
      t[0] += 1;
      t[1] += s.pred_acc[i] == part[i].label;
      t[2] += s.pred_norm[i] == part[i].label;
      t[3] += s.pred_token[i] == part[i].label;
      t[4] += part[i].truncated;
    }
    if (progress) progress(int64_t(std::min(mine.size(), first + size_t(config_.batch))), int64_t(mine.size()));
  }
  return t;
}

TaskResult Task::result(const Tally& t, double seconds) const {
  TaskResult r;
  r.task = config_.task;
  r.name = config_.name();
  r.seconds = seconds;
  if (config_.task == "perplexity") {
    LLMTRAIN_CHECK(t.size() == 3, "evaluation task ", r.name, ": a tally of ", t.size(), " values, expected 3");
    const double n = t[0], mean = t[1] / n;
    // The standard error of the mean per-id loss (ids taken as independent), carried to ppl and bits
    // per byte by their derivatives.
    const double se = n > 1 ? std::sqrt(std::max(0.0, t[2] / n - mean * mean) / (n - 1)) : kNaN;
    int64_t bytes = 0, ids = 0;
    for (const auto& d : docs_) {
      bytes += d.bytes;
      ids += int64_t(d.ids.size());
    }
    const double per_byte = n / double(bytes) / std::log(2.0);  // bits per byte for each nat per id
    r.scores = {{"ppl", std::exp(mean), std::exp(mean) * se},
                {"bits_per_byte", bytes > 0 ? mean * per_byte : kNaN, bytes > 0 ? se * per_byte : kNaN},
                {"nll", mean, se}};
    r.counts = {{"documents", int64_t(docs_.size())}, {"ids", ids}, {"scored", int64_t(n)}, {"bytes", bytes}};
    return r;
  }
  LLMTRAIN_CHECK(t.size() == 5, "evaluation task ", r.name, ": a tally of ", t.size(), " values, expected 5");
  r.scores = {proportion("acc_norm", t[2], t[0]), proportion("acc", t[1], t[0]), proportion("acc_token", t[3], t[0])};
  r.counts = {{"examples", int64_t(t[0])}, {"skipped", skipped_}, {"truncated", int64_t(t[4])}};
  return r;
}

}  // namespace llmtrain::eval
