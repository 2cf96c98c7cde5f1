#include "llmtrain/data/sft.h"

#include "sft_windows.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/types.h"
#include "permutation.h"

namespace llmtrain::data {

SFTDataset::SFTDataset(const tokenizer::Tokenizer& tok, SFTOptions options) : o_(std::move(options)) {
  detail::SFTWindows w = detail::read_sft_windows(tok, o_);
  inputs_ = std::move(w.inputs);
  targets_ = std::move(w.targets);
  examples_ = w.examples;
  truncated_ = w.truncated;
  dropped_ = w.dropped;
  skipped_lines_ = w.skipped_lines;
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
