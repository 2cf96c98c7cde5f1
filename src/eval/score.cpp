// The tensor side of evaluation: rows of ids through the model's forward, and the log-probability of
// each scored id read off the logits. Only the scored positions' logits are reduced, in float32 (a bf16
// model's log-softmax over 50K classes would lose the small differences between choices), in chunks
// so that a large batch never holds a float32 copy of all its logits.
#include <torch/torch.h>

#include <algorithm>

#include "llmtrain/core/error.h"
#include "llmtrain/eval/tasks.h"
#include "llmtrain/nn/causal_lm.h"

namespace llmtrain::eval {
namespace {

// A sequence whose last `scored` ids are scored, each given the ids before it.
struct Row {
  const std::vector<int32_t>* head;  // the ids before the tail (may be empty)
  const int32_t* tail;               // then these
  int64_t tail_len, scored;
};

constexpr int64_t kChunkRows = 1024;  // scored positions reduced at a time

// Log-probabilities of each row's scored ids, in row order: rows.size() vectors of `scored` values.
std::vector<std::vector<double>> score_rows(nn::CausalLM& model, const std::vector<Row>& rows) {
  torch::NoGradGuard no_grad;
  const auto params = model.module().parameters();
  LLMTRAIN_CHECK(!params.empty(), "evaluation: the model has no parameters");
  const torch::Device device = params.front().device();
  const int64_t B = int64_t(rows.size());
  int64_t T = 0;
  for (const auto& r : rows) T = std::max(T, int64_t(r.head->size()) + r.tail_len - 1);
  // Inputs are each row's ids but the last, right-padded with id 0 (causal: the padding is never seen).
  torch::Tensor idx = torch::zeros({B, T}, torch::kLong);
  std::vector<int64_t> sel, target;  // flat (b * T + t) positions whose next id is scored, and that id
  auto* p = idx.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    const Row& r = rows[size_t(b)];
    const int64_t h = int64_t(r.head->size()), len = h + r.tail_len;
    const auto id = [&](int64_t i) { return i < h ? (*r.head)[size_t(i)] : r.tail[i - h]; };
    for (int64_t i = 0; i + 1 < len; ++i) p[b * T + i] = id(i);
    for (int64_t i = len - 1 - r.scored; i + 1 < len; ++i) {
      sel.push_back(b * T + i);
      target.push_back(id(i + 1));
    }
  }
  const torch::Tensor logits = model.logits(idx.to(device)).flatten(0, 1);  // (B * T, V)
  const torch::Tensor rows_at = torch::tensor(sel, torch::kLong).to(device);
  const torch::Tensor ids = torch::tensor(target, torch::kLong).to(device);
  std::vector<torch::Tensor> parts;
  for (int64_t s = 0; s < int64_t(sel.size()); s += kChunkRows) {
    const int64_t n = std::min(kChunkRows, int64_t(sel.size()) - s);
    const torch::Tensor x = logits.index_select(0, rows_at.narrow(0, s, n)).to(torch::kFloat);  // (n, V)
    const torch::Tensor t = ids.narrow(0, s, n).unsqueeze(1);
    parts.push_back((x.gather(1, t).squeeze(1) - x.logsumexp(1)).to(torch::kDouble));
  }
  model.check_inputs(/*wait=*/true);
  const torch::Tensor all = parts.empty() ? torch::zeros({0}, torch::kDouble) : torch::cat(parts).cpu();
  const double* lp = all.data_ptr<double>();
  std::vector<std::vector<double>> out(rows.size());
  for (size_t b = 0; b < rows.size(); ++b) {
    out[b].assign(lp, lp + rows[b].scored);
    lp += rows[b].scored;
  }
  return out;
}

// Evaluation mode (no dropout) for a scope, then the mode the model was in.
class EvalMode {
 public:
  explicit EvalMode(torch::nn::Module& m) : m_(m), was_(m.is_training()) { m_.eval(); }
  ~EvalMode() { m_.train(was_); }

 private:
  torch::nn::Module& m_;
  bool was_;
};

// The first index of the largest value.
int64_t argmax(const std::vector<double>& v) { return std::max_element(v.begin(), v.end()) - v.begin(); }

}  // namespace

ChoiceScores score_choices(nn::CausalLM& model, const std::vector<ChoiceExample>& examples, int64_t batch) {
  LLMTRAIN_CHECK(batch >= 1, "evaluation: batch must be at least 1, got ", batch);
  const EvalMode mode(model.module());
  ChoiceScores out;
  for (size_t first = 0; first < examples.size(); first += size_t(batch)) {
    const size_t last = std::min(examples.size(), first + size_t(batch));
    std::vector<Row> rows;
    for (size_t e = first; e < last; ++e)
      for (const auto& c : examples[e].choices)
        rows.push_back({&examples[e].context, c.data(), int64_t(c.size()), int64_t(c.size())});
    const auto lp = score_rows(model, rows);
    size_t r = 0;
    for (size_t e = first; e < last; ++e) {
      const ChoiceExample& ex = examples[e];
      std::vector<double> ll, norm, token;
      for (size_t c = 0; c < ex.choices.size(); ++c, ++r) {
        double sum = 0;
        for (double v : lp[r]) sum += v;
        ll.push_back(sum);
        norm.push_back(sum / double(std::max<int64_t>(1, ex.choice_chars[c])));
        token.push_back(sum / double(ex.choices[c].size()));
      }
      out.pred_acc.push_back(argmax(ll));
      out.pred_norm.push_back(argmax(norm));
      out.pred_token.push_back(argmax(token));
      out.loglikelihood.push_back(std::move(ll));
    }
  }
  return out;
}

NllSums score_perplexity(nn::CausalLM& model, const std::vector<Document>& docs, int64_t window, int64_t stride,
                         int64_t batch, int rank, int world, const std::function<void(int64_t, int64_t)>& progress) {
  LLMTRAIN_CHECK(batch >= 1, "evaluation: batch must be at least 1, got ", batch);
  LLMTRAIN_CHECK(window >= 2 && window <= model.block_size(), "perplexity: window must be within [2, ",
                 model.block_size(), "] (the model's block size), got ", window);
  std::vector<std::pair<size_t, Window>> windows;  // this rank's share, every world-th window
  int64_t i = 0;
  for (size_t d = 0; d < docs.size(); ++d)
    for (const Window& w : sliding_windows(int64_t(docs[d].ids.size()), window, stride))
      if (i++ % world == rank) windows.push_back({d, w});
  const EvalMode mode(model.module());
  static const std::vector<int32_t> none;
  NllSums s;
  for (size_t first = 0; first < windows.size(); first += size_t(batch)) {
    std::vector<Row> rows;
    for (size_t w = first; w < std::min(windows.size(), first + size_t(batch)); ++w) {
      const auto& [d, win] = windows[w];
      rows.push_back({&none, docs[d].ids.data() + win.begin, win.end - win.begin, win.scored});
    }
    for (const auto& lp : score_rows(model, rows))
      for (double v : lp) {
        s.tokens += 1;
        s.nll -= v;
        s.nll_sq += v * v;
      }
    if (progress) progress(int64_t(std::min(windows.size(), first + size_t(batch))), int64_t(windows.size()));
  }
  return s;
}

}  // namespace llmtrain::eval
