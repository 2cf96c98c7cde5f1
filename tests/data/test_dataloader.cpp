// DataLoader over synthetic shards whose tokens encode their own position, so every window can be
// traced back to where it came from.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/data/dataloader.h"
#include "llmtrain/data/shard.h"
#include "test_util.h"

using llmtrain::data::Batch;
using llmtrain::data::DataLoader;
using llmtrain::data::DataLoaderOptions;
using llmtrain::data::DataLoaderState;
using llmtrain::testing::expect_error;

namespace {

constexpr int64_t kVocab = 1 << 20;  // uint32 shards: token = shard * 100000 + position

struct Shards {
  std::string dir = llmtrain::fs::make_temp_dir("llmtrain_loader_");
  explicit Shards(const std::vector<int64_t>& sizes) {
    for (size_t s = 0; s < sizes.size(); ++s) {
      std::vector<int32_t> t(size_t(sizes[s]));
      for (int64_t i = 0; i < sizes[s]; ++i) t[size_t(i)] = int32_t(s * 100000 + i);
      char name[32];
      std::snprintf(name, sizeof name, "/train_%06zu.bin", s);
      llmtrain::data::write_shard(dir + name, t, kVocab);
    }
  }
  ~Shards() { llmtrain::fs::remove_tree(dir); }
  DataLoaderOptions options(int64_t B, int64_t T) const {
    DataLoaderOptions o;
    o.pattern = dir + "/train_*.bin";
    o.batch_size = B;
    o.seq_len = T;
    return o;
  }
};

std::vector<Batch> take(DataLoader& loader, int n) {
  std::vector<Batch> out;
  for (int i = 0; i < n; ++i) out.push_back(loader.next());
  return out;
}

void expect_same(const Batch& a, const Batch& b, const std::string& what) {
  EXPECT_TRUE(torch::equal(a.inputs, b.inputs)) << what;
  EXPECT_TRUE(torch::equal(a.targets, b.targets)) << what;
}

}  // namespace

TEST(DataLoader, WindowsAreConsecutiveTokensAndTargetsShiftByOne) {
  Shards shards({23});
  auto o = shards.options(2, 4);
  o.shuffle = false;
  DataLoader loader(o);
  EXPECT_EQ(loader.windows_per_epoch(), 5);  // (23 - 1) / 4
  const Batch b = loader.next();
  ASSERT_EQ(b.inputs.sizes(), (std::vector<int64_t>{2, 4}));
  EXPECT_EQ(b.inputs.scalar_type(), torch::kLong);
  EXPECT_TRUE(torch::equal(b.inputs, torch::tensor({{0, 1, 2, 3}, {4, 5, 6, 7}}, torch::kLong)));
  EXPECT_TRUE(torch::equal(b.targets, torch::tensor({{1, 2, 3, 4}, {5, 6, 7, 8}}, torch::kLong)));
  loader.next();  // windows 2 and 3
  const Batch straddling = loader.next();
  EXPECT_EQ(straddling.inputs[0][0].item<int64_t>(), 16) << "the last window of epoch 0";
  EXPECT_EQ(straddling.inputs[1][0].item<int64_t>(), 0) << "then the first of epoch 1";
  EXPECT_EQ(loader.state(), (DataLoaderState{1, 0, 1}));
}

TEST(DataLoader, ShuffledEpochVisitsEveryWindowOnce) {
  Shards shards({101, 57, 300});
  DataLoader loader(shards.options(1, 8));
  const int64_t n = loader.windows_per_epoch();
  EXPECT_EQ(n, 12 + 7 + 37);
  std::vector<int64_t> first, second;
  for (int64_t i = 0; i < n; ++i) first.push_back(loader.next().inputs[0][0].item<int64_t>());
  for (int64_t i = 0; i < n; ++i) second.push_back(loader.next().inputs[0][0].item<int64_t>());
  const std::set<int64_t> starts(first.begin(), first.end());
  EXPECT_EQ(int64_t(starts.size()), n);
  for (int64_t s : starts) EXPECT_EQ((s % 100000) % 8, 0) << s;        // windows start every T tokens
  EXPECT_EQ(std::set<int64_t>(second.begin(), second.end()), starts);  // the same windows
  EXPECT_NE(second, first);                                            // in a new order
}

TEST(DataLoader, BatchShuffleKeepsEachBatchARunOfTheText) {
  Shards shards({101, 57, 300});  // 12, 7 and 37 windows of 8: 6, 3 and 18 batches of 2
  auto o = shards.options(2, 8);
  o.shuffle_unit = llmtrain::data::ShuffleUnit::kBatch;
  DataLoader loader(o);
  EXPECT_EQ(loader.windows_per_epoch(), 12 + 6 + 36);  // a shard's last partial batch is left out
  std::vector<int64_t> first, second;
  for (int i = 0; i < 27; ++i) {
    const Batch b = loader.next();
    const int64_t start = b.inputs[0][0].item<int64_t>();
    EXPECT_EQ(b.inputs[1][0].item<int64_t>(), start + 8) << "batch " << i << ": two consecutive windows";
    EXPECT_EQ((start % 100000) % 16, 0) << "batches start every B * T tokens";
    first.push_back(start);
  }
  for (int i = 0; i < 27; ++i) second.push_back(loader.next().inputs[0][0].item<int64_t>());
  EXPECT_EQ(std::set<int64_t>(first.begin(), first.end()).size(), 27u);  // every batch once
  EXPECT_EQ(std::set<int64_t>(second.begin(), second.end()), std::set<int64_t>(first.begin(), first.end()));
  EXPECT_NE(second, first);  // in a new order
  std::vector<int64_t> sorted = first;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_NE(sorted, first) << "shuffled, not in file order";

  auto two = o;  // ranks split each batch: rank r reads the r-th B windows of every R * B
  two.world_size = 2;
  two.rank = 1;
  const Batch b = DataLoader(two).next();
  EXPECT_EQ(b.inputs[0][0].item<int64_t>() % 32, 16);
  auto tiny = shards.options(8, 8);  // the second shard holds 7 windows: not one batch of 8
  tiny.shuffle_unit = llmtrain::data::ShuffleUnit::kBatch;
  expect_error([&] { DataLoader{tiny}; }, {"train_000001.bin", "7 windows", "batch_size = 8"});
}

TEST(DataLoader, BatchShuffleDrawsLlmcsOrder) {
  // The expected starts come from llm.c's DataLoader algorithm run in Python on a Mersenne Twister
  // seeded as llm.c seeds it (init_genrand(42)): shards permuted each epoch from the last order, then
  // each shard's batches as it is entered.
  Shards shards({101, 57, 300});  // 6, 3 and 18 batches of 2 x 8
  auto o = shards.options(2, 8);
  o.shuffle_unit = llmtrain::data::ShuffleUnit::kBatch;
  o.seed = 42;
  const std::vector<int64_t> expected = {
      200000, 200096, 200016, 200224, 200208, 200048, 200144, 200176, 200064, 200128, 200032, 200240, 200112, 200272,
      200080, 200160, 200192, 200256, 100000, 100032, 100016, 0,      16,     80,     64,     48,     32,     200240,
      200160, 200208, 200096, 200128, 200032, 200192, 200224, 200256, 200144, 200048, 200080, 200272, 200112, 200000,
      200064, 200176, 200016, 100000, 100016, 100032, 32,     80,     0,      16,     48,     64};
  DataLoader loader(o);
  std::vector<int64_t> starts;
  DataLoaderState mid;
  for (size_t i = 0; i < expected.size(); ++i) {
    if (i == 31) mid = loader.state();  // epoch 1, inside its first shard
    starts.push_back(loader.next().inputs[0][0].item<int64_t>());
  }
  EXPECT_EQ(starts, expected);
  DataLoader resumed(o);
  resumed.load_state(mid);
  for (size_t i = 31; i < expected.size(); ++i)
    EXPECT_EQ(resumed.next().inputs[0][0].item<int64_t>(), expected[i]) << "batch " << i << " after a restore";
}

TEST(DataLoader, RanksTogetherReadWhatOneProcessReadsInConsecutiveBatches) {
  Shards shards({1000, 333, 777});
  const int R = 3;
  DataLoader single(shards.options(4, 16));
  std::vector<std::unique_ptr<DataLoader>> ranks;
  for (int r = 0; r < R; ++r) {
    auto o = shards.options(4, 16);
    o.rank = r;
    o.world_size = R;
    ranks.push_back(std::make_unique<DataLoader>(o));
  }
  // 30 steps cross two epoch boundaries (126 windows, 12 per step).
  for (int step = 0; step < 30; ++step)
    for (int r = 0; r < R; ++r) expect_same(ranks[size_t(r)]->next(), single.next(), "step " + std::to_string(step));
}

TEST(DataLoader, RestoredStateGivesTheSameBatches) {
  Shards shards({500, 260});
  for (int prefetch : {0, 3}) {
    auto o = shards.options(3, 10);
    o.prefetch = prefetch;
    DataLoader first(o);
    take(first, 7);
    const DataLoaderState saved = first.state();
    const auto expected = take(first, 40);  // crosses an epoch boundary
    DataLoader second(o);
    take(second, 2);  // anywhere
    second.load_state(saved);
    const auto got = take(second, 40);
    for (size_t i = 0; i < got.size(); ++i) expect_same(got[i], expected[i], "batch " + std::to_string(i));
  }
}

TEST(DataLoader, SeedsDecideTheOrder) {
  Shards shards({2000});
  auto a = shards.options(4, 8), b = a, c = a;
  c.seed = 7;
  DataLoader la(a), lb(b), lc(c);
  const auto x = la.next(), y = lb.next(), z = lc.next();
  EXPECT_TRUE(torch::equal(x.inputs, y.inputs));
  EXPECT_FALSE(torch::equal(x.inputs, z.inputs));
}

TEST(DataLoader, BadInputNamesTheProblem) {
  Shards shards({100, 5});
  expect_error(
      [&] {
        auto o = shards.options(1, 8);
        o.pattern = shards.dir + "/nope_*.bin";
        DataLoader l(o);
      },
      {"no shard matches", "nope_*.bin"});
  expect_error([&] { DataLoader l(shards.options(1, 8)); }, {"train_000001.bin holds 5 tokens", "seq_len + 1 = 9"});
  Shards one({100});
  expect_error(
      [&] {
        auto o = one.options(1, 8);
        o.rank = 2;
        o.world_size = 2;
        DataLoader l(o);
      },
      {"rank 2"});
  expect_error(
      [&] {
        auto o = one.options(0, 8);
        DataLoader l(o);
      },
      {"batch_size must be positive"});
  {
    auto o = one.options(4, 8);
    o.vocab_size = 50;  // the shard's tokens run to 99
    o.shuffle = false;
    o.prefetch = 1;  // the error travels from the prefetch thread
    DataLoader l(o);
    expect_error(
        [&] {
          l.next();
          l.next();
        },
        {"train_000000.bin holds token id 50", "position 50", "[0, 50)"});
  }
  DataLoader l(one.options(1, 8));
  expect_error([&] { l.load_state({0, 3, 0}); }, {"shard 3"});
  expect_error([&] { l.load_state({0, 0, 12}); }, {"position 12", "12 windows"});
}

TEST(DataLoader, BatchesLandOnTheGpu_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  Shards shards({4000});
  auto o = shards.options(8, 64);
  DataLoader cpu(o);
  o.device = torch::kCUDA;
  DataLoader gpu(o);
  for (int i = 0; i < 5; ++i) {
    const Batch g = gpu.next(), c = cpu.next();
    EXPECT_TRUE(g.inputs.is_cuda());
    EXPECT_TRUE(torch::equal(g.inputs.cpu(), c.inputs));
    EXPECT_TRUE(torch::equal(g.targets.cpu(), c.targets));
  }
}
