// What every Communicator must compute over two ranks, for the MPI and Gloo tests alike: sums of
// every dtype (16-bit floats too), a strided tensor, a broadcast, means, maxima, reduce-scatter and
// all-gather, and the argument errors. Every rank calls it, in the same order.
#pragma once

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "llmtrain/dist/communicator.h"
#include "test_util.h"

namespace llmtrain::testing {

inline void expect_collectives(dist::Communicator& comm) {
  ASSERT_EQ(comm.world_size(), 2) << "needs two ranks";
  const int r = comm.rank();
  for (const auto dtype : {torch::kFloat, torch::kDouble, torch::kLong, torch::kBFloat16}) {
    auto t = torch::full({3, 5}, r + 1, dtype);
    comm.all_reduce_sum(t);
    EXPECT_TRUE(torch::equal(t, torch::full({3, 5}, 3, dtype))) << dtype;
  }
  auto strided = torch::zeros({6, 4}).t();  // not contiguous: reduced through a copy, written back
  strided.fill_(r + 1.5);
  comm.all_reduce_sum(strided);
  EXPECT_TRUE(torch::equal(strided, torch::full({4, 6}, 4.0)));
  auto b = torch::arange(6, torch::kFloat) * (r + 1);
  comm.broadcast(b, 1);
  EXPECT_TRUE(torch::equal(b, torch::arange(6, torch::kFloat) * 2));
  comm.barrier();
  expect_error([&] { comm.broadcast(b, 2); }, {"root 2 is not a rank of 2"});
  expect_error(
      [&] {
        auto s = torch::zeros({2}, torch::kInt8);
        comm.all_reduce_sum(s);
      },
      {"all_reduce_sum", "Char"});
  auto avg = torch::full({4}, double(r), torch::kDouble);
  comm.all_reduce_avg(avg);
  EXPECT_TRUE(torch::equal(avg, torch::full({4}, 0.5, torch::kDouble)));
  const auto whole = torch::arange(6, torch::kFloat) + 10 * r;  // rank 0: 0..5, rank 1: 10..15
  auto part = torch::zeros({3});
  comm.reduce_scatter_sum(whole, part);  // the sum 10, 12, ..., 20; rank r takes its half
  EXPECT_TRUE(torch::equal(part, torch::arange(3, torch::kFloat) * 2 + 10 + 6 * r)) << part;
  auto gathered = torch::zeros({6});
  comm.all_gather(part, gathered);
  EXPECT_TRUE(torch::equal(gathered, torch::arange(6, torch::kFloat) * 2 + 10)) << gathered;
  auto most = torch::tensor({float(r), 5.f - r, -1.f, -3.f + r}).view({2, 2});
  comm.all_reduce_max(most);
  EXPECT_TRUE(torch::equal(most, torch::tensor({1.f, 5.f, -1.f, -2.f}).view({2, 2}))) << most;
  expect_error(
      [&] {
        auto small = torch::zeros({2});
        comm.reduce_scatter_sum(whole, small);
      },
      {"reduce_scatter_sum", "2 parts of 2"});
}

}  // namespace llmtrain::testing
