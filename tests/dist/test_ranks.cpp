// Two CPU ranks of a launch, through dist::from_environment() (ctest starts this binary under mpirun,
// and under torchrun, whose ranks meet through the store and reduce with Gloo): the collectives' results,
// dist::DataParallel's buckets and averages, the Trainer on two ranks with half a batch each against
// one process with two accumulation steps (plain and ZeRO-1), and configurations that differ. Every
// rank runs every test, making the same collective calls in order. RanksKilledRank runs only under
// tests/dist/killed_rank.sh, RanksAbortedRank and RanksThrowingRank only under env_ranks.sh.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <cstdlib>

#include "dist/collectives.h"
#include "llmtrain/dist/data_parallel.h"
#include "llmtrain/dist/launch.h"
#include "llmtrain/train/trainer.h"
#include "test_util.h"
#include "train/run_folder.h"

// The launch's own communicator: MPI under mpirun, Gloo under torchrun.
std::shared_ptr<llmtrain::dist::Communicator> world() {
  const auto comm = llmtrain::dist::from_environment();
  if (!comm) ADD_FAILURE() << "run under mpirun -np 2 or torchrun --nproc-per-node 2";
  return comm;
}

TEST(Ranks, CollectivesSumAndBroadcastOverTheRanks) {
  const auto comm = world();
  ASSERT_TRUE(comm);
  llmtrain::testing::expect_collectives(*comm);
  EXPECT_EQ(llmtrain::dist::from_environment(), comm);  // one communicator a process
}

TEST(Ranks, TwoRanksOnHalfBatchesTrainAsOneProcessWithTwoAccumulationSteps) {
  const auto comm = world();
  ASSERT_EQ(comm->world_size(), 2);
  for (const char* preset : {"tiny", "llama-tiny"}) {  // GPT-2 and a Llama-family model alike
    SCOPED_TRACE(preset);
    llmtrain::testing::RunFolder run;  // each rank's own folder, with the same shards
    const std::vector<std::string> five = {"train.max_steps=5", "checkpoint.every=0",
                                           std::string("model.preset=") + preset, "model.vocab_size=4099"};
    llmtrain::train::Trainer one(run.config("one", five));
    ASSERT_EQ(one.grad_accum_steps(), 2);
    one.run();
    const auto want = one.model().module().named_parameters();
    for (const char* zero : {"false", "true"}) {  // plain data parallelism, then ZeRO-1
      SCOPED_TRACE(std::string("train.zero=") + zero);
      std::vector<std::string> sets = five;
      sets.push_back(std::string("train.zero=") + zero);
      llmtrain::train::Trainer two(run.config(std::string("two_") + zero, sets), comm);
      ASSERT_EQ(two.grad_accum_steps(), 1);
      two.run();
      for (const auto& p : two.model().module().named_parameters()) {
        const auto mine = p.value().detach().clone();
        EXPECT_LT((mine - want[p.key()]).abs().max().item<double>(), 1e-5) << p.key();
        auto sum = mine.clone();
        comm->all_reduce_sum(sum);
        EXPECT_TRUE(torch::equal(sum, 2 * mine)) << p.key() << ": the ranks hold different weights";
      }
    }
  }
}

// fp8's amaxes are taken over every rank's micro-batches, as one process over all of them would take
// them: the ranks see different data, yet take the same scales, and checkpoint the same. (Before the
// first update each rank scales its first pass from its own micro-batch, so of the step's amaxes only
// those that no fp8 product has touched yet are one process's: every weight's, and the first layer's input.)
TEST(Ranks, Fp8RanksTakeTheirScalesFromEveryRanksAmaxes) {
  const auto comm = world();
  ASSERT_EQ(comm->world_size(), 2);
  llmtrain::testing::RunFolder run;
  const std::vector<std::string> sets = {"train.fp8=true", "train.precision=bf16-master", "train.max_steps=1",
                                         "checkpoint.every=0"};
  llmtrain::train::Trainer one(run.config("one", sets));
  ASSERT_EQ(one.grad_accum_steps(), 2);
  one.run();
  llmtrain::train::Trainer two(run.config("two", sets), comm);
  two.run();
  const auto want = one.model().module().named_buffers();
  int64_t layers = 0, firsts = 0;
  for (const auto& b : two.model().module().named_buffers()) {
    if (b.key().find(".fp8.") == std::string::npos) continue;
    const auto mine = b.value().detach().clone();
    auto sum = mine.clone();
    comm->all_reduce_sum(sum);
    EXPECT_TRUE(torch::equal(sum, 2 * mine)) << b.key() << ": the ranks took different scales";
    if (b.key().find("amax_history") == std::string::npos) continue;
    ++layers;
    // The step's amaxes (column 1 after the update) of the weight, and of the first layer's input.
    const bool first = b.key().find("h.0.attn.c_attn.") != std::string::npos;
    firsts += first;
    const auto rows = first ? torch::indexing::Slice(0, 2) : torch::indexing::Slice(1, 2);
    EXPECT_TRUE(torch::equal(mine.index({rows, 1}), want[b.key()].index({rows, 1}))) << b.key() << "\n"
                                                                                     << mine << "\n"
                                                                                     << want[b.key()];
  }
  EXPECT_GT(layers, 0);
  EXPECT_EQ(firsts, 1);
}

// Each rank draws its own dropout masks (rank 0 as a single process would), and a checkpoint keeps
// every rank's generators: a run stopped and resumed takes the losses of the unbroken run to the bit.
TEST(Ranks, EachRankDrawsItsOwnDropoutAndResumesItExactly) {
  const auto comm = world();
  ASSERT_EQ(comm->world_size(), 2);
  // One out_dir for both ranks (rank 0's temporary folder; its name sent over as int64 characters).
  llmtrain::testing::RunFolder run;
  torch::Tensor name = torch::zeros({256}, torch::kLong);
  for (size_t i = 0; i < run.dir.path.size(); ++i) name[int64_t(i)] = int64_t(run.dir.path[i]);
  comm->broadcast(name, 0);
  std::string shared;
  for (int64_t i = 0; i < 256 && name[i].item<int64_t>() != 0; ++i) shared += char(name[i].item<int64_t>());
  const auto config = [&](const std::string& out) {
    return run.config("unused", {"model.dropout=0.2", "train.max_steps=6", "train.schedule=constant",
                                 "checkpoint.every=0", "out_dir=" + shared + "/" + out});
  };
  const auto losses = [&](llmtrain::train::Trainer& t, int64_t stop_at) {
    std::vector<double> out;
    t.on_step([&](const llmtrain::train::StepRecord& r) {
      out.push_back(r.loss);
      if (r.step == stop_at) t.request_stop();
    });
    t.run();
    return out;
  };
  std::vector<double> full;
  {
    llmtrain::train::Trainer t(config("full"), comm);
    full = losses(t, -1);
  }
  // The ranks' generators differ: each drew other masks.
  torch::Tensor state = at::detail::getDefaultCPUGenerator().get_state().to(torch::kLong);
  torch::Tensor other = state.clone();
  comm->broadcast(other, 0);
  if (comm->rank() == 1) {
    EXPECT_FALSE(torch::equal(state, other)) << "both ranks drew the same dropout masks";
  }
  {
    llmtrain::train::Trainer t(config("split"), comm);
    EXPECT_EQ(losses(t, 3).size(), 3u);  // stops after step 3 and checkpoints every rank's generators
  }
  llmtrain::train::Trainer t(config("split"), comm);
  ASSERT_TRUE(t.resume_if_possible());
  const auto rest = losses(t, -1);
  ASSERT_EQ(rest.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(rest[i], full[3 + i]) << "step " << 4 + i;
}

// Buckets from the last parameter back, a new one past bucket_bytes; gradients accumulated over two
// backwards (the first not synced) and averaged over the ranks equal the mean of both ranks' sums; a
// parameter without a gradient reads zero; reductions start during backward.
TEST(Ranks, DataParallelAveragesAccumulatedGradientsInBuckets) {
  const auto comm = world();
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
TEST(Ranks, ShardedDataParallelSplitsTheBucketsBetweenTheRanks) {
  const auto comm = world();
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

TEST(Ranks, RanksWithDifferentConfigurationsAllFail) {
  const auto comm = world();
  llmtrain::testing::RunFolder run;
  llmtrain::train::Trainer t(
      run.config("differ", {"train.max_steps=2", comm->rank() == 1 ? "train.lr=2e-3" : "train.lr=1e-3"}), comm);
  llmtrain::testing::expect_error([&] { t.run(); }, {"configurations differ", "this is rank"});
}

// Rank 1 kills itself during training; the job must end (the launcher ends rank 0, or rank 0's wait
// times out) instead of rank 0 waiting in its next collective forever. killed_rank.sh checks the exit status and the
// time.
TEST(RanksKilledRank, TheOtherRankDoesNotHang) {
  if (!std::getenv("LLMTRAIN_KILL_RANK_TEST")) GTEST_SKIP() << "run by tests/dist/killed_rank.sh";
  const auto comm = world();
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

// Rank 1 throws at step 3 of run_training (failpoint train:throw:rank1): it ends every rank. Rank 1
// aborts the run; rank 0, waiting in a collective, gets an error naming rank 1 and ends too. Run by
// ctest under env_ranks.sh, with no launcher that would end rank 0 itself.
TEST(RanksThrowingRank, EveryRankEnds) {
  if (!std::getenv("LLMTRAIN_THROW_RANK_TEST")) GTEST_SKIP() << "run by ctest under tests/dist/env_ranks.sh";
  const auto comm = world();
  ASSERT_TRUE(comm);
  llmtrain::testing::RunFolder run;
  llmtrain::train::run_training(run.config("throwing", {"train.max_steps=1000", "checkpoint.every=0"}), {}, comm);
  ADD_FAILURE() << "rank " << comm->rank() << " went on to the end of the run";
}

// Rank 1 aborts (the store marks the run failed) while rank 0 waits in a collective: rank 0's wait
// ends at once with an error naming rank 1. Run by ctest under env_ranks.sh, with no launcher that
// would end rank 0 itself.
TEST(RanksAbortedRank, TheOtherRanksWaitEndsWithAnError) {
  if (!std::getenv("LLMTRAIN_ABORT_RANK_TEST")) GTEST_SKIP() << "run by ctest under tests/dist/env_ranks.sh";
  const auto comm = world();
  ASSERT_TRUE(comm);
  if (comm->rank() == 1) comm->abort(3);
  auto t = torch::ones({4});
  const auto start = std::chrono::steady_clock::now();
  llmtrain::testing::expect_error([&] { comm->all_reduce_sum(t); }, {"rank 1 failed and ended the run"});
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(took, 10.0);
  if (!HasFailure()) std::printf("rank 0 saw rank 1's abort after %.2f s\n", took);
}
