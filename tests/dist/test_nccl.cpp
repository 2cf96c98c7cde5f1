// dist::NcclCommunicator at world size 1 on the GPU: the collectives leave what one rank holds, CPU
// tensors travel through the device, and the Trainer with it (DataParallel's buckets, no graph) takes
// the same steps as without it; the watchdog ends a run whose collective does not finish in time.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <chrono>
#include <thread>

#include "llmtrain/dist/nccl.h"
#include "llmtrain/train/trainer.h"
#include "test_util.h"
#include "train/run_folder.h"

using llmtrain::dist::NcclCommunicator;

TEST(Nccl, WorldOfOneCollectivesKeepTheRanksTensors_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  const auto comm = NcclCommunicator::create(nullptr, torch::Device(torch::kCUDA, 0));
  EXPECT_EQ(comm->rank(), 0);
  EXPECT_EQ(comm->world_size(), 1);
  const auto x = torch::randn({1000}, torch::TensorOptions().device(torch::kCUDA));
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble, torch::kLong}) {
    auto t = (x * 100).to(dtype);
    const auto want = t.clone();
    comm->all_reduce_sum(t);
    EXPECT_TRUE(torch::equal(t, want)) << dtype;
    comm->all_reduce_avg(t);
    EXPECT_TRUE(torch::equal(t, want)) << dtype;
    comm->start_all_reduce_avg(t);
    comm->wait();
    EXPECT_TRUE(torch::equal(t, want)) << dtype;
  }
  auto part = torch::zeros_like(x), gathered = torch::zeros_like(x);
  comm->reduce_scatter_sum(x, part);
  comm->all_gather(part, gathered);
  EXPECT_TRUE(torch::equal(gathered, x));
  auto cpu = torch::tensor({2.5}, torch::kDouble);  // through the device and back
  comm->all_reduce_sum(cpu);
  EXPECT_EQ(cpu.item<double>(), 2.5);
  comm->broadcast(part, 0);
  comm->barrier();
  llmtrain::testing::expect_error([&] { comm->broadcast(part, 1); }, {"root 1 is not a rank of 1"});
  llmtrain::testing::expect_error(
      [&] {
        auto s = torch::zeros({3}, x.options());
        comm->reduce_scatter_sum(x, s);
      },
      {"reduce_scatter_sum", "1 parts of 3"});
}

TEST(Nccl, TrainerAtWorldOneTakesTheStepsOfOneProcess_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  llmtrain::testing::RunFolder run;
  const std::vector<std::string> sets = {"train.max_steps=5", "checkpoint.every=0", "device=cuda",
                                         "train.cuda_graph=false"};
  llmtrain::train::Trainer plain(run.config("plain", sets));
  plain.run();
  const auto want = plain.model().module().named_parameters();
  for (const char* zero : {"false", "true"}) {  // plain data parallelism, then ZeRO-1 (one shard: all of it)
    SCOPED_TRACE(std::string("train.zero=") + zero);
    std::vector<std::string> with = sets;
    with.push_back(std::string("train.zero=") + zero);
    llmtrain::train::Trainer dp(run.config(std::string("dp_") + zero, with),
                                NcclCommunicator::create(nullptr, torch::Device(torch::kCUDA, 0)));
    ASSERT_EQ(dp.grad_accum_steps(), 2);
    dp.run();
    for (const auto& p : dp.model().module().named_parameters())
      EXPECT_LT((p.value() - want[p.key()]).abs().max().item<double>(), 1e-5) << p.key();
  }
  // The asynchronous reduce-scatter NCCL takes for ZeRO-1's buckets: the mean of one rank is its input.
  const auto comm = NcclCommunicator::create(nullptr, torch::Device(torch::kCUDA, 0));
  const auto x = torch::randn({1000}, torch::kCUDA);
  auto out = torch::zeros({1000}, torch::kCUDA);
  comm->start_reduce_scatter_avg(x, out);
  comm->wait();
  EXPECT_TRUE(torch::equal(out, x));
}

// The watchdog: a collective queued behind seconds of GPU work (fp32 matmuls of 16384^2) has not
// finished a second later, so the communicator with a 1 s timeout ends the process with status 1 and
// says which collective. A child process runs it (gtest re-executes the binary for the death test).
TEST(Nccl, WatchdogEndsTheRunWhenACollectiveDoesNotFinishInTime_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        const auto comm = NcclCommunicator::create(nullptr, torch::Device(torch::kCUDA, 0), std::chrono::seconds(1));
        const auto a = torch::randn({16384, 16384}, torch::TensorOptions().device(torch::kCUDA));
        auto acc = torch::zeros_like(a);
        for (int i = 0; i < 100; ++i) acc.addmm_(a, a);  // ~0.15 s each on an H200
        auto t = acc.narrow(0, 0, 1).flatten();
        comm->all_reduce_sum(t);                                // queued after the matmuls
        std::this_thread::sleep_for(std::chrono::seconds(60));  // the watchdog ends the process first
        std::exit(0);
      },
      ::testing::ExitedWithCode(1), "NCCL all_reduce_sum did not finish within 1 s: a rank is gone or stuck");
}
