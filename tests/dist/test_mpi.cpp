// dist::MpiCommunicator under mpirun with two CPU ranks (ctest starts this binary through mpirun): the
// collectives' results, dist::DataParallel's buckets and averages, the Trainer on two ranks with half a
// batch each against one process with two accumulation steps (plain and ZeRO-1), and configurations
// that differ. Every
// rank runs every test, making the same collective calls in order. MpiKilledRank runs only under
// tests/dist/killed_rank.sh.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <csignal>
#include <cstdlib>

#include "llmtrain/dist/data_parallel.h"
#include "llmtrain/dist/mpi.h"
#include "llmtrain/train/trainer.h"
#include "test_util.h"
#include "train/run_folder.h"

using llmtrain::dist::MpiCommunicator;

TEST(Mpi, CollectivesSumAndBroadcastOverTheRanks) {
  const auto comm = MpiCommunicator::world();
  ASSERT_EQ(comm->world_size(), 2) << "run under mpirun -np 2";
  const int r = comm->rank();
  for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kLong, torch::kBFloat16}) {
    auto t = torch::full({3, 5}, r + 1, dtype);
    comm->all_reduce_sum(t);
    EXPECT_TRUE(torch::equal(t, torch::full({3, 5}, 3, dtype))) << dtype;
  }
  auto strided = torch::zeros({6, 4}).t();  // not contiguous: reduced through a copy, written back
  strided.fill_(r + 1.5);
  comm->all_reduce_sum(strided);
  EXPECT_TRUE(torch::equal(strided, torch::full({4, 6}, 4.0)));
  auto b = torch::arange(6, torch::kFloat) * (r + 1);
  comm->broadcast(b, 1);
  EXPECT_TRUE(torch::equal(b, torch::arange(6, torch::kFloat) * 2));
  comm->barrier();
  llmtrain::testing::expect_error([&] { comm->broadcast(b, 2); }, {"root 2 is not a rank of 2"});
  llmtrain::testing::expect_error([&] { auto s = torch::zeros({2}, torch::kInt8); comm->all_reduce_sum(s); },
                                  {"no MPI type for Char"});
  auto avg = torch::full({4}, double(r), torch::kDouble);
  comm->all_reduce_avg(avg);
  EXPECT_TRUE(torch::equal(avg, torch::full({4}, 0.5, torch::kDouble)));
  const auto whole = torch::arange(6, torch::kFloat) + 10 * r;  // rank 0: 0..5, rank 1: 10..15
  auto part = torch::zeros({3});
  comm->reduce_scatter_sum(whole, part);  // the sum 10, 12, ..., 20; rank r takes its half
  EXPECT_TRUE(torch::equal(part, torch::arange(3, torch::kFloat) * 2 + 10 + 6 * r)) << part;
  auto gathered = torch::zeros({6});
  comm->all_gather(part, gathered);
  EXPECT_TRUE(torch::equal(gathered, torch::arange(6, torch::kFloat) * 2 + 10)) << gathered;
  llmtrain::testing::expect_error([&] { auto small = torch::zeros({2}); comm->reduce_scatter_sum(whole, small); },
                                  {"reduce_scatter_sum", "2 parts of 2"});
  const auto found = llmtrain::dist::from_environment();  // mpirun's environment: this job
  ASSERT_TRUE(found);
  EXPECT_EQ(found->world_size(), 2);
  EXPECT_EQ(found->rank(), r);
}

TEST(Mpi, TwoRanksOnHalfBatchesTrainAsOneProcessWithTwoAccumulationSteps) {
  const auto comm = MpiCommunicator::world();
  ASSERT_EQ(comm->world_size(), 2);
  llmtrain::testing::RunFolder run;  // each rank's own folder, with the same shards
  const std::vector<std::string> five = {"train.max_steps=5", "checkpoint.every=0"};
  llmtrain::train::Trainer one(run.config("one", five));
  ASSERT_EQ(one.grad_accum_steps(), 2);
  one.run();
  const auto want = one.model()->named_parameters();
  for (const char* zero : {"false", "true"}) {  // plain data parallelism, then ZeRO-1
    SCOPED_TRACE(std::string("train.zero=") + zero);
    std::vector<std::string> sets = five;
    sets.push_back(std::string("train.zero=") + zero);
    llmtrain::train::Trainer two(run.config(std::string("two_") + zero, sets), comm);
    ASSERT_EQ(two.grad_accum_steps(), 1);
    two.run();
    for (const auto& p : two.model()->named_parameters()) {
      const auto mine = p.value().detach().clone();
      EXPECT_LT((mine - want[p.key()]).abs().max().item<double>(), 1e-5) << p.key();
      auto sum = mine.clone();
      comm->all_reduce_sum(sum);
      EXPECT_TRUE(torch::equal(sum, 2 * mine)) << p.key() << ": the ranks hold different weights";
    }
  }
}

// Buckets from the last parameter back, a new one past bucket_bytes; gradients accumulated over two
// backwards (the first not synced) and averaged over the ranks equal the mean of both ranks' sums; a
// parameter without a gradient reads zero; reductions start during backward.
TEST(Mpi, DataParallelAveragesAccumulatedGradientsInBuckets) {
  const auto comm = MpiCommunicator::world();
  const int r = comm->rank();
  torch::manual_seed(3);
  std::vector<torch::Tensor> params = {torch::randn({64}).requires_grad_(), torch::randn({8, 8}).requires_grad_(),
                                       torch::randn({16}).requires_grad_(), torch::randn({4}).requires_grad_()};
  llmtrain::dist::DataParallelOptions o;
  o.bucket_bytes = 80 * 4;  // 80 floats: {p3, p2} (20), then {p1} (64 + 16 > 80), then {p0}
  llmtrain::dist::DataParallel dp(params, comm, o);
  EXPECT_EQ(dp.num_buckets(), 3);
  EXPECT_EQ(dp.bucket_of_parameters(), (std::vector<int64_t>{2, 1, 0, 0}));
  {
    torch::NoGradGuard no_grad;
    for (auto& p : params) p.mul_(r + 1);  // rank 1's differ
  }
  dp.broadcast_parameters();
  const auto x = torch::linspace(-1, 1, 4);
  const auto loss = [&](double k) {  // p0 is left out: no gradient
    return (params[3] * x * k).sum() + (params[1] * params[1]).sum() * k + params[2].pow(3).sum();
  };
  dp.zero_grad();
  dp.set_sync(false);
  loss(r + 1.0).backward();
  dp.set_sync(true);
  loss(2 * (r + 1.0)).backward();
  // Buckets start in order: p0's last one waits for finish(), the two before it started in backward.
  EXPECT_EQ(dp.started_during_backward(), 2);
  dp.finish();
  // Rank r's sum over its two backwards has k = 3 (r + 1); the mean over ranks has k = 4.5.
  EXPECT_TRUE(torch::allclose(params[3].grad(), x * 4.5));
  EXPECT_TRUE(torch::allclose(params[1].grad(), params[1].detach() * 2 * 4.5));
  EXPECT_TRUE(torch::allclose(params[2].grad(), 2 * 3 * params[2].detach().pow(2)));
  EXPECT_EQ(params[0].grad().abs().sum().item<double>(), 0.0);
  // The next step starts from zero again, whichever way the optimizer reset the gradients.
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
  dp.zero_grad();
  loss(1.0).backward();
  dp.finish();
  EXPECT_TRUE(torch::allclose(params[3].grad(), x));
}

// ZeRO-1's shard: buckets padded to a multiple of the ranks, each rank's slices its half of every
// bucket (together every element once), their gradients the mean over the ranks, and the gather
// putting each rank's new values into every rank's parameters.
TEST(Mpi, ShardedDataParallelSplitsTheBucketsBetweenTheRanks) {
  const auto comm = MpiCommunicator::world();
  const int r = comm->rank();
  std::vector<torch::Tensor> params = {torch::ones({6}).requires_grad_(), torch::ones({3, 3}).requires_grad_()};
  llmtrain::dist::DataParallelOptions o;
  o.shard_optimizer = true;
  // One bucket: p1 (9) then p0 (6), padded to 16; rank 0 takes p1[0:8], rank 1 p1[8:9] and p0.
  llmtrain::dist::DataParallel dp(params, comm, o);
  int64_t mine = 0;
  for (const auto& s : dp.shard()) {
    mine += s.length;
    EXPECT_TRUE(torch::equal(s.value, torch::ones({s.length})));  // read from the parameters
  }
  EXPECT_EQ(mine, r == 0 ? 8 : 7);
  ASSERT_EQ(dp.shard().size(), r == 0 ? 1u : 2u);
  dp.zero_grad();
  ((params[0] * (r + 1)).sum() + (params[1] * params[1] * (r + 1)).sum()).backward();
  dp.finish();
  for (const auto& s : dp.shard()) {  // the mean over ranks: k = 1.5; d(p^2)/dp = 2p
    EXPECT_TRUE(torch::allclose(s.grad, torch::full({s.length}, s.param == 0 ? 1.5 : 3.0))) << s.param;
    s.value.fill_(10.0 * (r + 1));  // this rank's new values
  }
  dp.gather_parameters();
  const auto flat1 = params[1].detach().reshape(-1);
  EXPECT_TRUE(torch::equal(flat1.narrow(0, 0, 8), torch::full({8}, 10.0)));
  EXPECT_TRUE(torch::equal(flat1.narrow(0, 8, 1), torch::full({1}, 20.0)));
  EXPECT_TRUE(torch::equal(params[0].detach(), torch::full({6}, 20.0)));
}

TEST(Mpi, RanksWithDifferentConfigurationsAllFail) {
  const auto comm = MpiCommunicator::world();
  llmtrain::testing::RunFolder run;
  llmtrain::train::Trainer t(
      run.config("differ", {"train.max_steps=2", comm->rank() == 1 ? "train.lr=2e-3" : "train.lr=1e-3"}), comm);
  llmtrain::testing::expect_error([&] { t.run(); }, {"configurations differ", "this is rank"});
}

// Rank 1 kills itself during training; the job must end (mpirun ends rank 0) instead of rank 0 waiting
// in its next collective forever. killed_rank.sh checks the exit status and the time.
TEST(MpiKilledRank, TheOtherRankDoesNotHang) {
  if (!std::getenv("LLMTRAIN_KILL_RANK_TEST")) GTEST_SKIP() << "run by tests/dist/killed_rank.sh";
  const auto comm = MpiCommunicator::world();
  llmtrain::testing::RunFolder run;
  llmtrain::train::Trainer t(run.config("killed", {"train.max_steps=1000", "checkpoint.every=0"}), comm);
  t.on_step([&](const llmtrain::train::StepRecord& rec) {
    if (comm->rank() == 1 && rec.step == 3) {
      std::printf("rank 1 kills itself at step 3\n");
      std::fflush(stdout);
      std::raise(SIGKILL);
    }
  });
  t.run();
  ADD_FAILURE() << "the run went on to its end after a rank died";
}
