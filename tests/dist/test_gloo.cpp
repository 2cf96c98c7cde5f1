// dist::GlooCommunicator in one process: two ranks on threads meet at a free port and compute what
// every communicator must; a rank that never comes and a store that is not there end the others'
// waits with an error within the timeout (an aborted rank: test_ranks.cpp); from_environment's
// torchrun variables.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <thread>

#include "dist/collectives.h"
#include "llmtrain/dist/gloo.h"
#include "llmtrain/dist/launch.h"
#include "test_util.h"

namespace {

using llmtrain::dist::free_port;
using llmtrain::dist::GlooCommunicator;
using llmtrain::dist::Rendezvous;

Rendezvous meeting(int port, int rank, int seconds, int world = 2) {
  Rendezvous w;
  w.rank = rank;
  w.world_size = world;
  w.port = port;
  w.timeout = std::chrono::seconds(seconds);
  return w;
}

// Runs body(rank's communicator) on `world` threads that meet at a fresh port.
template <typename F>
void ranks_on_threads(int world, int seconds, F body) {
  const int port = free_port();
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r)
    ranks.emplace_back([&, r] {
      try {
        body(*GlooCommunicator::connect(meeting(port, r, seconds, world)));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  for (auto& t : ranks) t.join();
}

template <typename F>
void two_ranks(int seconds, F body) {
  ranks_on_threads(2, seconds, body);
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST(Gloo, TwoRanksComputeEveryCollective) {
  two_ranks(60, [](GlooCommunicator& comm) {
    llmtrain::testing::expect_collectives(comm);
    // Many collectives in a row, each one matched with the same one of the other rank.
    for (int i = 0; i < 50; ++i) {
      auto t = torch::full({2}, double(i + comm.rank()));
      comm.all_reduce_sum(t);
      EXPECT_TRUE(torch::equal(t, torch::full({2}, 2.0 * i + 1))) << i;
    }
    // 24 MiB: Gloo's ring in many chunks.
    auto big = torch::arange(6 << 20, torch::kFloat) * (comm.rank() + 1);
    comm.all_reduce_sum(big);
    EXPECT_TRUE(torch::equal(big, torch::arange(6 << 20, torch::kFloat) * 3));
    auto empty = torch::zeros({0});
    comm.all_reduce_sum(empty);
    auto half = torch::full({3}, 1.0, torch::kBFloat16);  // summed in float32
    comm.all_reduce_avg(half);
    EXPECT_TRUE(torch::equal(half, torch::full({3}, 1.0, torch::kBFloat16)));
  });
}

// Every rank gets the same bits of a sum, and 16-bit floats are added in float32: three ranks' values
// where the order of the additions changes a float32 sum, and adding in bf16 changes a bf16 one.
TEST(Gloo, EveryRankGetsTheSameSumAnd16BitFloatsAreAddedInFloat32) {
  ranks_on_threads(3, 60, [](GlooCommunicator& comm) {
    const float parts[3] = {1e8f, 1.0f, -1e8f};  // (1e8 + 1) - 1e8 = 0 in float32; 1e8 - 1e8 + 1 = 1
    auto f32 = torch::full({4}, parts[comm.rank()]);
    comm.all_reduce_sum(f32);
    auto every = torch::zeros({3, 4});
    comm.all_gather(f32, every);
    EXPECT_TRUE(torch::equal(every, f32.expand({3, 4}))) << every;
    EXPECT_TRUE(((f32 == 0) | (f32 == 1)).all().item<bool>()) << f32;  // each element in some order
    // bf16: 1 + 2^-8 + 2^-8 is 1 + 2^-7 in float32, a bf16 value; added in bf16 it stays 1.
    const double bparts[3] = {1.0, std::ldexp(1.0, -8), std::ldexp(1.0, -8)};
    auto b16 = torch::full({4}, bparts[comm.rank()], torch::kBFloat16);
    comm.all_reduce_sum(b16);
    EXPECT_TRUE(torch::equal(b16, torch::full({4}, 1.0 + std::ldexp(1.0, -7), torch::kBFloat16))) << b16;
  });
}

TEST(Gloo, ARankThatNeverComesEndsTheRendezvousWithAnError) {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  llmtrain::testing::expect_error([&] { GlooCommunicator::connect(meeting(port, 0, 2)); },
                                  {"rank 0 of 2", "no rendezvous at 127.0.0.1:" + std::to_string(port),
                                   "this rank hosts it", "within 2 s", "MASTER_ADDR"});
  EXPECT_LT(seconds_since(start), 30);
  llmtrain::testing::expect_error([&] { GlooCommunicator::connect(meeting(free_port(), 1, 2)); },
                                  {"rank 1 of 2", "no rendezvous at 127.0.0.1:"});
  EXPECT_LT(seconds_since(start), 60);
  llmtrain::testing::expect_error([&] { GlooCommunicator::connect(meeting(port, 2, 2)); }, {"rank 2 is not one of 2"});
}

TEST(Gloo, ACollectiveThatTheOtherRankNeverJoinsTimesOut) {
  two_ranks(2, [](GlooCommunicator& comm) {
    if (comm.rank() == 1) {  // stays connected without reducing
      std::this_thread::sleep_for(std::chrono::seconds(5));
      return;
    }
    auto t = torch::ones({4});
    const auto start = std::chrono::steady_clock::now();
    llmtrain::testing::expect_error([&] { comm.all_reduce_sum(t); },
                                    {"rank 0 of 2: all_reduce_sum: waited 2 s for the other ranks",
                                     "a rank is gone or stuck", "LLMTRAIN_DIST_TIMEOUT"});
    EXPECT_LT(seconds_since(start), 10);
  });
}

TEST(Gloo, TorchrunVariablesAreCheckedAndNamed) {
  // from_environment() reads the process's variables; each case sets them and puts them back.
  const auto with = [](std::vector<std::pair<const char*, const char*>> vars, std::initializer_list<std::string> want) {
    for (const auto& [k, v] : vars) ::setenv(k, v, 1);
    llmtrain::testing::expect_error([] { llmtrain::dist::from_environment(); }, want);
    for (const auto& [k, v] : vars) ::unsetenv(k);
  };
  with({{"WORLD_SIZE", "2"}}, {"WORLD_SIZE is 2 but RANK is not set", "mpirun -np N"});
  with({{"WORLD_SIZE", "2"}, {"RANK", "1"}}, {"MASTER_ADDR is not set"});
  with({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}}, {"MASTER_PORT is not set"});
  with({{"WORLD_SIZE", "two"}}, {"WORLD_SIZE=\"two\" is not an integer"});
  with({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "8x"}},
       {"MASTER_PORT=\"8x\" is not an integer"});
  with({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "70000"}},
       {"MASTER_PORT=70000 is outside [1, 65535]"});
  with({{"WORLD_SIZE", "2"},
        {"RANK", "1"},
        {"MASTER_ADDR", "127.0.0.1"},
        {"MASTER_PORT", "1"},
        {"LLMTRAIN_DIST_TIMEOUT", "0"}},
       {"LLMTRAIN_DIST_TIMEOUT is 0"});
  // A world of no ranks is a broken launch, not one process; a rank outside the world is named.
  with({{"WORLD_SIZE", "0"}}, {"WORLD_SIZE=0 is outside [1, 1048576]"});
  with({{"WORLD_SIZE", "-4"}}, {"WORLD_SIZE=-4 is outside [1, 1048576]"});
  with({{"WORLD_SIZE", "2"}, {"RANK", "2"}}, {"RANK=2 is outside [0, 1]"});
  with({{"OMPI_COMM_WORLD_SIZE", "0"}}, {"OMPI_COMM_WORLD_SIZE=0 is outside [1, 1048576]"});
  EXPECT_EQ(llmtrain::dist::from_environment(), nullptr);  // a lone process
}
