#include "llmtrain/data/sft.h"

#include "jsonl.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/types.h"
#include "permutation.h"

namespace llmtrain::data {
namespace {

constexpr int64_t kIgnore = kIgnoreIndex;

struct Example {
  std::vector<int64_t> inputs, targets;  // (L) each, targets already masked
};

}  // namespace

SFTDataset::SFTDataset(const tokenizer::Tokenizer& tok, SFTOptions options) : o_(std::move(options)) {
  const int64_t T = o_.seq_len;
  LLMTRAIN_CHECK(T > 0, "SFT: seq_len must be positive, got ", T);
  const auto eot = tok.eot_id();
  LLMTRAIN_CHECK(eot.has_value(), "SFT: the tokenizer has no end-of-text id to end examples with");
  detail::LineReader in(o_.path, "SFT");
  std::vector<Example> examples;
  std::string line;
  while (in.next(line)) {
    const std::string where = o_.path + ":" + std::to_string(in.line_no());
    const auto j = detail::parse_object("SFT", line, where, o_.skip_bad_lines, skipped_lines_);
    if (!j) continue;
    std::vector<int32_t> prompt, completion;
    try {
      if (j->contains(o_.prompt_field) || j->contains(o_.completion_field)) {
        const auto p = detail::string_field("SFT", *j, o_.prompt_field, where, o_.skip_bad_lines, skipped_lines_);
        const auto c = p ? detail::string_field("SFT", *j, o_.completion_field, where, o_.skip_bad_lines, skipped_lines_)
                         : std::nullopt;
        if (!c) continue;
        prompt = tok.encode(*p);
        completion = tok.encode(*c);
      } else {
        const auto t = detail::string_field("SFT", *j, o_.text_field, where, o_.skip_bad_lines, skipped_lines_);
        if (!t) continue;
        completion = tok.encode(*t);  // plain text: every token is trained on
      }
    } catch (const llmtrain::Error& e) {
      detail::bad_line("SFT", where, e.what(), o_.skip_bad_lines, skipped_lines_);
      continue;
    }
    ++examples_;
    // tokens = prompt + completion + eot; target k is token k + 1, trained when that token is not prompt.
    std::vector<int64_t> tokens(prompt.begin(), prompt.end());
    tokens.insert(tokens.end(), completion.begin(), completion.end());
    tokens.push_back(*eot);
    if (int64_t(tokens.size()) > T + 1) {
      tokens.resize(size_t(T + 1));
      ++truncated_;
    }
    Example ex;
    for (size_t k = 0; k + 1 < tokens.size(); ++k) {
      ex.inputs.push_back(tokens[k]);
      ex.targets.push_back(k + 1 < prompt.size() ? kIgnore : tokens[k + 1]);
    }
    if (std::all_of(ex.targets.begin(), ex.targets.end(), [](int64_t t) { return t == kIgnore; })) {
      ++dropped_;
      continue;
    }
    examples.push_back(std::move(ex));
  }
  LLMTRAIN_CHECK(!examples.empty(), "SFT: ", o_.path, " holds no example with a completion token within seq_len ", T,
                 " (", examples_, " examples read, ", dropped_, " dropped, ", skipped_lines_, " lines skipped)");

  // Lay examples into windows; padding has input end-of-text and target -100.
  std::vector<int64_t> in_w, tg_w;
  const auto close_window = [&] {
    if (in_w.empty()) return;
    in_w.resize(size_t(T), *eot);
    tg_w.resize(size_t(T), kIgnore);
    inputs_.push_back(std::move(in_w));
    targets_.push_back(std::move(tg_w));
    in_w.clear();
    tg_w.clear();
  };
  for (const auto& ex : examples) {
    if (!o_.pack || int64_t(in_w.size() + ex.inputs.size()) > T) close_window();
    in_w.insert(in_w.end(), ex.inputs.begin(), ex.inputs.end());
    tg_w.insert(tg_w.end(), ex.targets.begin(), ex.targets.end());
  }
  close_window();
}

Batch SFTDataset::batch(const std::vector<int64_t>& indices) const {
  const int64_t B = int64_t(indices.size()), T = o_.seq_len;
  torch::Tensor inputs = torch::empty({B, T}, torch::kLong), targets = torch::empty({B, T}, torch::kLong);
  for (int64_t b = 0; b < B; ++b) {
    const int64_t i = indices[size_t(b)];
    LLMTRAIN_CHECK(i >= 0 && i < size(), "SFT: window ", i, " is outside [0, ", size(), ")");
    std::copy(inputs_[size_t(i)].begin(), inputs_[size_t(i)].end(), inputs.data_ptr<int64_t>() + b * T);
    std::copy(targets_[size_t(i)].begin(), targets_[size_t(i)].end(), targets.data_ptr<int64_t>() + b * T);
  }
  return {inputs, targets};
}

SFTLoader::SFTLoader(const SFTDataset& data, Options options) : data_(data), o_(options) {
  LLMTRAIN_CHECK(o_.batch_size > 0, "SFTLoader: batch_size must be positive, got ", o_.batch_size);
  LLMTRAIN_CHECK(o_.world_size > 0 && o_.rank >= 0 && o_.rank < o_.world_size, "SFTLoader: rank ", o_.rank,
                 " is outside world size ", o_.world_size);
  seek({0, 0, 0});
}

void SFTLoader::seek(const DataLoaderState& s) {
  LLMTRAIN_CHECK(s.epoch >= 0 && s.shard == 0 && s.position >= 0 && s.position < data_.size(), "SFTLoader: state (epoch ",
                 s.epoch, ", shard ", s.shard, ", position ", s.position, ") is outside ", data_.size(), " windows");
  state_ = s;
  order_ = detail::permutation(data_.size(), o_.seed, uint64_t(s.epoch), 0, o_.shuffle);
}

void SFTLoader::load_state(const DataLoaderState& state) { seek(state); }

Batch SFTLoader::next() {
  std::vector<int64_t> mine;
  for (int64_t i = 0; i < int64_t(o_.world_size) * o_.batch_size; ++i) {
    const int64_t b = i - int64_t(o_.rank) * o_.batch_size;
    if (b >= 0 && b < o_.batch_size) mine.push_back(order_[size_t(state_.position)]);
    if (++state_.position == data_.size()) seek({state_.epoch + 1, 0, 0});
  }
  Batch batch = data_.batch(mine);
  if (o_.device.is_cuda()) {
    batch.inputs = batch.inputs.to(o_.device);
    batch.targets = batch.targets.to(o_.device);
  }
  return batch;
}

}  // namespace llmtrain::data
