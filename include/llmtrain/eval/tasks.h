// Evaluation tasks over any CausalLM: multiple choice by completion likelihood (HellaSwag's JSONL, or a
// generic {"context", "choices", "label"} form) and sliding-window perplexity over text files or token
// shards. The protocol follows lm-evaluation-harness where llm.c and it agree and says so where they
// differ, so the numbers can be set beside published ones:
// - A choice is scored as the continuation of its context: the context's ids are encode(context), the
//   choice's are encode(context + continuation) past them (trailing spaces of the context move to the
//   continuation first), so a tokenizer that merges across the seam is scored as it reads the whole.
//   HellaSwag's continuation is " " + ending; the generic form's is the choice as written.
// - The input starts with `start_id` (the Llama family's bos) when there is one; an empty context
//   becomes that id, else the tokenizer's end-of-text.
// - acc picks the choice of the highest summed log-likelihood; acc_norm divides it by the choice's length
//   in characters (lm-evaluation-harness's acc_norm); acc_token by its number of tokens (what llm.c's
//   HellaSwag calls acc_norm). Ties go to the first choice. Standard errors are the sample's,
//   sqrt(p (1 - p) / (n - 1)).
// - Perplexity follows Hugging Face's sliding-window recipe on each document's ids (a text file's are
//   start_id, else the end-of-text, then the text, so every token of the text is scored; a shard's are
//   its ids as they are): windows of `window` ids every `stride`, each scoring the ids the window before
//   did not, the first id never. The negative log-likelihoods are summed exactly (the recipe weights a
//   window's mean by its count less one). Bits per byte divide the nats by ln 2 and the bytes of the
//   scored text: a text file's size, a shard's decoded text (end-of-text ids excluded).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace llmtrain::nn {
class CausalLM;
}
namespace llmtrain::tokenizer {
class Tokenizer;
}

namespace llmtrain::eval {

/// What a task reads and how it runs; the evaluate binary's options and the Trainer's eval.tasks entries.
///   TaskConfig t;  t.task = "hellaswag";  t.data = {"hellaswag_val.jsonl"};  t.limit = 1000;
struct TaskConfig {
  std::string task;               // hellaswag, choice or perplexity
  std::vector<std::string> data;  // choice tasks: one JSONL file; perplexity: text files or .bin token shards
  int64_t limit = 0;              // choice tasks: the first `limit` examples (0: all)
  int64_t batch = 0;      // examples (choice: all of an example's choices together) or windows per forward; 0: 16
  int64_t window = 0;     // perplexity: ids per window (0: the model's block size)
  int64_t stride = 0;     // perplexity: ids between window starts (0: half the window)
  bool skip_bad = false;  // choice tasks: count and skip malformed lines and bad labels instead of failing
  /// A short name for logs: "hellaswag", "choice:file.jsonl", "perplexity".
  std::string name() const;
};

/// One scored figure and its standard error (NaN where none is defined).
struct Score {
  std::string name;  // acc, acc_norm, acc_token, ppl, bits_per_byte, nll
  double value = 0, stderr_ = 0;
};

/// A task's outcome: the scores, the counts behind them, and how long it took.
struct TaskResult {
  std::string task, name;
  std::vector<Score> scores;  // the first is the one the loss picture draws
  std::vector<std::pair<std::string, int64_t>>
      counts;  // examples, skipped, truncated; or documents, windows, tokens, bytes
  double seconds = 0;
  /// One JSON object: {"task", "name", each score and its "<name>_stderr", each count, "seconds"}.
  std::string json() const;
  /// "hellaswag: acc 0.2950 ± 0.0046  acc_norm ... (10042 examples, 12.3 s)"
  std::string line() const;
};

/// A multiple-choice example after tokenization: its context ids (start id included) and each
/// choice's continuation ids.
struct ChoiceExample {
  std::vector<int32_t> context;
  std::vector<std::vector<int32_t>> choices;
  std::vector<int64_t> choice_chars;  // each choice's length in characters (acc_norm)
  int64_t label = 0;
  int64_t line = 0;        // where it was in its file (1-based)
  bool truncated = false;  // the context lost ids on its left to fit the model's window
};

/// Reads `path` (JSONL; `hellaswag`: ctx, endings, label; else context, choices, label) and tokenizes
/// it as the protocol above says, for a model of `block_size` positions. Malformed lines, a label out
/// of range, fewer than two choices, an empty choice or one longer than the window fail naming
/// path:line, or with `skip_bad` are counted in *skipped. An empty file (no example) is an error.
///   auto ex = read_choice_examples("hs.jsonl", true, *tok, bos, 1024, 0, false, &skipped);
std::vector<ChoiceExample> read_choice_examples(const std::string& path, bool hellaswag,
                                                const tokenizer::Tokenizer& tok, std::optional<int32_t> start_id,
                                                int64_t block_size, int64_t limit, bool skip_bad, int64_t* skipped);

/// Every choice's summed log-likelihood and the prediction by each rule, per example.
struct ChoiceScores {
  std::vector<std::vector<double>> loglikelihood;  // [example][choice]
  std::vector<int64_t> pred_acc, pred_norm, pred_token;
};

/// Scores `examples` with `model` where its parameters are (no gradient; under the caller's autocast):
/// `batch` examples per forward, each example's choices side by side in it.
ChoiceScores score_choices(nn::CausalLM& model, const std::vector<ChoiceExample>& examples, int64_t batch);

/// A document for perplexity: its ids and the bytes of text its scored ids stand for (0: unknown).
struct Document {
  std::vector<int32_t> ids;
  int64_t bytes = 0;
};

/// The documents of `files`: a file ending in .bin is a token shard (its ids as they are; its bytes
/// decoded by `tok`); any other is UTF-8 text, encoded after `start_id` (else the end-of-text).
std::vector<Document> read_documents(const std::vector<std::string>& files, const tokenizer::Tokenizer& tok,
                                     std::optional<int32_t> start_id);

/// Sums over scored ids: count, negative log-likelihood (nats) and its square.
struct NllSums {
  double tokens = 0, nll = 0, nll_sq = 0;
};

/// The windows of Hugging Face's recipe over `ids`: {begin, end, ids scored at the end of the window}.
struct Window {
  int64_t begin = 0, end = 0, scored = 0;
};
/// Throws llmtrain::Error unless 1 <= stride <= window.
std::vector<Window> sliding_windows(int64_t length, int64_t window, int64_t stride);

/// The summed negative log-likelihood of `docs`' windows by `model` (no gradient; under the caller's
/// autocast), `batch` windows per forward; with `world` > 1 only every world-th window from `rank`'s.
/// `progress(done, total)` after each batch, when set.
NllSums score_perplexity(nn::CausalLM& model, const std::vector<Document>& docs, int64_t window, int64_t stride,
                         int64_t batch, int rank = 0, int world = 1,
                         const std::function<void(int64_t, int64_t)>& progress = {});

/// A task, its data read and tokenized once (the Trainer runs it at every evaluation): run() scores the
/// model, on `rank`'s share of the examples or windows when `world` > 1 (the caller sums tallies over
/// ranks, then result()).
///   Task t(cfg, *tok, bos, model->block_size());  auto r = t.result(t.run(*model));  puts(r.line().c_str());
class Task {
 public:
  Task(TaskConfig config, const tokenizer::Tokenizer& tok, std::optional<int32_t> start_id, int64_t block_size);
  /// Sums that add up over ranks (a tensor's worth of doubles).
  using Tally = std::vector<double>;
  /// `progress(done, total)` after each batch, when set.
  Tally run(nn::CausalLM& model, int rank = 0, int world = 1,
            const std::function<void(int64_t, int64_t)>& progress = {}) const;
  TaskResult result(const Tally& tally, double seconds = 0) const;
  const TaskConfig& config() const { return config_; }

 private:
  TaskConfig config_;
  std::vector<ChoiceExample> examples_;
  std::vector<Document> docs_;
  int64_t skipped_ = 0, block_size_ = 0;
};

}  // namespace llmtrain::eval
