// dist::StoreCommunicator in one process: two ranks on threads meet at a free port and compute what
// every communicator must; a rank that never comes and a store that is not there end the others'
// waits with an error within the timeout (an aborted rank: test_ranks.cpp); from_environment's
// torchrun variables.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <thread>

#include "dist/collectives.h"
#include "llmtrain/dist/launch.h"
#include "llmtrain/dist/store.h"
#include "test_util.h"

namespace {

using llmtrain::dist::Rendezvous;
using llmtrain::dist::StoreCommunicator;

// A TCP port that nothing listens on now.
int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  EXPECT_EQ(::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len), 0);
  ::close(fd);
  return ntohs(a.sin_port);
}

Rendezvous meeting(int port, int rank, int seconds) {
  Rendezvous w;
  w.rank = rank;
  w.world_size = 2;
  w.port = port;
  w.timeout = std::chrono::seconds(seconds);
  return w;
}

// Runs body(rank's communicator) on two threads that meet at a fresh port.
template <typename F>
void two_ranks(int seconds, F body) {
  const int port = free_port();
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.emplace_back([&, r] {
      try {
        body(*StoreCommunicator::connect(meeting(port, r, seconds)));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  for (auto& t : ranks) t.join();
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST(Store, TwoRanksComputeEveryCollective) {
  two_ranks(60, [](StoreCommunicator& comm) {
    llmtrain::testing::expect_collectives(comm);
    // Many collectives in a row: each one's keys are its own, and gone once every rank has read them.
    for (int i = 0; i < 50; ++i) {
      auto t = torch::full({2}, double(i + comm.rank()));
      comm.all_reduce_sum(t);
      EXPECT_TRUE(torch::equal(t, torch::full({2}, 2.0 * i + 1))) << i;
    }
    // 24 MiB: many pieces, each rank's own.
    auto big = torch::arange(6 << 20, torch::kFloat) * (comm.rank() + 1);
    comm.all_reduce_sum(big);
    EXPECT_TRUE(torch::equal(big, torch::arange(6 << 20, torch::kFloat) * 3));
    auto empty = torch::zeros({0});
    comm.all_reduce_sum(empty);
    auto half = torch::full({3}, 1.0, torch::kBFloat16);  // summed in float32, in rank order
    comm.all_reduce_avg(half);
    EXPECT_TRUE(torch::equal(half, torch::full({3}, 1.0, torch::kBFloat16)));
  });
}

TEST(Store, ARankThatNeverComesEndsTheRendezvousWithAnError) {
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  llmtrain::testing::expect_error([&] { StoreCommunicator::connect(meeting(port, 0, 2)); },
                                  {"rank 0 of 2", "no rendezvous at 127.0.0.1:" + std::to_string(port),
                                   "this rank hosts it", "within 2 s", "MASTER_ADDR"});
  EXPECT_LT(seconds_since(start), 30);
  llmtrain::testing::expect_error([&] { StoreCommunicator::connect(meeting(free_port(), 1, 2)); },
                                  {"rank 1 of 2", "no rendezvous at 127.0.0.1:"});
  EXPECT_LT(seconds_since(start), 60);
  llmtrain::testing::expect_error([&] { StoreCommunicator::connect(meeting(port, 2, 2)); }, {"rank 2 is not one of 2"});
}

TEST(Store, ACollectiveThatTheOtherRankNeverJoinsTimesOut) {
  two_ranks(2, [](StoreCommunicator& comm) {
    if (comm.rank() == 1) return;  // leaves without reducing
    auto t = torch::ones({4});
    const auto start = std::chrono::steady_clock::now();
    llmtrain::testing::expect_error([&] { comm.all_reduce_sum(t); },
                                    {"rank 0 of 2: all_reduce_sum: waited 2 s for the other ranks",
                                     "a rank is gone or stuck", "LLMTRAIN_DIST_TIMEOUT"});
    EXPECT_LT(seconds_since(start), 10);
  });
}

TEST(Store, TorchrunVariablesAreCheckedAndNamed) {
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
  with({{"WORLD_SIZE", "2"}, {"RANK", "1"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1"},
        {"LLMTRAIN_DIST_TIMEOUT", "0"}},
       {"LLMTRAIN_DIST_TIMEOUT is 0"});
  // A world of no ranks is a broken launch, not one process; a rank outside the world is named.
  with({{"WORLD_SIZE", "0"}}, {"WORLD_SIZE=0 is outside [1, 1048576]"});
  with({{"WORLD_SIZE", "-4"}}, {"WORLD_SIZE=-4 is outside [1, 1048576]"});
  with({{"WORLD_SIZE", "2"}, {"RANK", "2"}}, {"RANK=2 is outside [0, 1]"});
  with({{"OMPI_COMM_WORLD_SIZE", "0"}}, {"OMPI_COMM_WORLD_SIZE=0 is outside [1, 1048576]"});
  EXPECT_EQ(llmtrain::dist::from_environment(), nullptr);  // a lone process
}
