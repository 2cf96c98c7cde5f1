#include "llmtrain/data/sft.h"

#include "llmtrain/core/error.h"
#include "llmtrain/core/types.h"
#include "permutation.h"
#include "sft_windows.h"

namespace llmtrain::data {

SFTDataset::SFTDataset(const tokenizer::Tokenizer& tok, SFTOptions options) : o_(std::move(options)) {
  detail::SFTExamples w = detail::read_sft_examples(tok, o_);
  for (auto& ex : w.examples) {
    lengths_.push_back(int64_t(ex.inputs.size()));
    inputs_.push_back(std::move(ex.inputs));
    targets_.push_back(std::move(ex.targets));
  }
  pad_ = *tok.eot_id();  // read_sft_examples has checked that there is one
  read_ = w.read;
  truncated_ = w.truncated;
  dropped_ = w.dropped;
  skipped_lines_ = w.skipped_lines;
  chat_format_ = w.chat_format;
}

SFTDataset::~SFTDataset() = default;

int64_t SFTDataset::size() const { return int64_t(inputs_.size()); }

std::vector<SFTDataset::Window> SFTDataset::windows(const std::vector<int64_t>& order) const {
  return detail::pack_sft_windows(lengths_, order, o_.seq_len, o_.pack);
}

Batch SFTDataset::batch(const std::vector<Window>& windows) const {
  const int64_t B = int64_t(windows.size()), T = o_.seq_len;
  Batch out;
  out.inputs = torch::full({B, T}, pad_, torch::kLong);  // padding: end-of-text, off the loss
  out.targets = torch::full({B, T}, kIgnoreIndex, torch::kLong);
  if (o_.pack) out.positions = torch::empty({B, T}, torch::kLong);
  for (int64_t b = 0; b < B; ++b) {
    int64_t at = 0;
    for (const int64_t i : windows[size_t(b)]) {
      LLMTRAIN_CHECK(i >= 0 && i < size(), "SFT: example ", i, " is outside [0, ", size(), ")");
      const int64_t n = lengths_[size_t(i)];
      LLMTRAIN_CHECK(at + n <= T, "SFT: the examples of window ", b, " hold more than seq_len ", T, " tokens");
      std::copy(inputs_[size_t(i)].begin(), inputs_[size_t(i)].end(), out.inputs.data_ptr<int64_t>() + b * T + at);
      std::copy(targets_[size_t(i)].begin(), targets_[size_t(i)].end(), out.targets.data_ptr<int64_t>() + b * T + at);
      if (o_.pack)
        std::iota(out.positions.data_ptr<int64_t>() + b * T + at, out.positions.data_ptr<int64_t>() + b * T + at + n,
                  0);
      at += n;
    }
    if (o_.pack)
      std::iota(out.positions.data_ptr<int64_t>() + b * T + at, out.positions.data_ptr<int64_t>() + (b + 1) * T, 0);
  }
  return out;
}

SFTLoader::SFTLoader(const SFTDataset& data, Options options) : data_(data), o_(options) {
  LLMTRAIN_CHECK(o_.batch_size > 0, "SFTLoader: batch_size must be positive, got ", o_.batch_size);
  LLMTRAIN_CHECK(o_.world_size > 0 && o_.rank >= 0 && o_.rank < o_.world_size, "SFTLoader: rank ", o_.rank,
                 " is outside world size ", o_.world_size);
  seek({0, 0, 0});
}

void SFTLoader::seek(const DataLoaderState& s) {
  LLMTRAIN_CHECK(s.epoch >= 0 && s.shard == 0 && s.position >= 0, "SFTLoader: state (epoch ", s.epoch, ", shard ",
                 s.shard, ", position ", s.position, ") is not one of SFT windows");
  if (windows_.empty() || s.epoch != state_.epoch)
    windows_ = data_.windows(detail::permutation(data_.size(), o_.seed, uint64_t(s.epoch), 0, o_.shuffle));
  LLMTRAIN_CHECK(s.position < int64_t(windows_.size()), "SFTLoader: state (epoch ", s.epoch, ", position ", s.position,
                 ") is outside the ", windows_.size(), " windows of that epoch");
  state_ = s;
}

void SFTLoader::load_state(const DataLoaderState& state) { seek(state); }

Batch SFTLoader::next() {
  std::vector<SFTDataset::Window> mine;
  for (int64_t i = 0; i < int64_t(o_.world_size) * o_.batch_size; ++i) {
    const int64_t b = i - int64_t(o_.rank) * o_.batch_size;
    if (b >= 0 && b < o_.batch_size) mine.push_back(windows_[size_t(state_.position)]);
    if (++state_.position == int64_t(windows_.size())) seek({state_.epoch + 1, 0, 0});
  }
  Batch batch = data_.batch(mine);
  if (o_.device.is_cuda()) {
    batch.inputs = batch.inputs.to(o_.device);
    batch.targets = batch.targets.to(o_.device);
    if (batch.positions.defined()) batch.positions = batch.positions.to(o_.device);
  }
  return batch;
}

}  // namespace llmtrain::data
