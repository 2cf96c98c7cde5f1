// dist::MpiCommunicator under mpirun with two CPU ranks (ctest starts this binary through mpirun): the
// collectives' results, and the Trainer on two ranks with half a batch each against one process with
// two accumulation steps. Every rank runs every test, making the same collective calls in order.
#include <gtest/gtest.h>
#include <torch/torch.h>

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
  llmtrain::train::Trainer two(run.config("two", five), comm);
  ASSERT_EQ(two.grad_accum_steps(), 1);
  two.run();
  const auto want = one.model()->named_parameters();
  for (const auto& p : two.model()->named_parameters()) {
    const auto mine = p.value().detach().clone();
    EXPECT_LT((mine - want[p.key()]).abs().max().item<double>(), 1e-5) << p.key();
    auto sum = mine.clone();
    comm->all_reduce_sum(sum);
    EXPECT_TRUE(torch::equal(sum, 2 * mine)) << p.key() << ": the ranks hold different weights";
  }
}
