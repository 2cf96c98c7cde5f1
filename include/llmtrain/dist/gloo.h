// The ranks of a torchrun-style launch (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT): they meet through
// c10d's TCPStore (rank 0 hosts it, or torchrun's agent does: TORCHELASTIC_USE_AGENT_STORE) and
// reduce CPU tensors with c10d's Gloo process group, which connects the ranks to each other over TCP
// through that store. The store stays the rendezvous, the place where a failing rank marks the run
// aborted, and NCCL's bootstrap (the unique id is one broadcast).
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "llmtrain/dist/communicator.h"

namespace llmtrain::dist {

/// Where and as whom a rank meets the others.
struct Rendezvous {
  int rank = 0, world_size = 1;
  std::string host = "127.0.0.1";
  int port = 29500;
  bool agent_store = false;                   // the store is up already (torchrun's agent): every rank connects
  std::chrono::milliseconds timeout{600000};  // joining, and each collective's wait for the other ranks
  std::string key_prefix = "llmtrain/";       // this run's keys (an agent's store outlives a restart)
};

/// CPU tensors: float32, float64, int64 and int32 summed as they are, bfloat16 and float16 in float32;
/// every rank gets the same bits. A rank that waits longer than the timeout for the others throws
/// llmtrain::Error, as does one whose peer is gone; abort() tells the other ranks, whose waits then
/// throw an error naming the aborting rank. Gloo listens on GLOO_SOCKET_IFNAME's interface when that is
/// set, on the loopback when the rendezvous host is a loopback address (one machine), and otherwise on
/// the address this machine's host name resolves to (as PyTorch does).
///   llmtrain::dist::Rendezvous where;
///   where.rank = 1, where.world_size = 2, where.port = 29511;
///   auto comm = llmtrain::dist::GlooCommunicator::connect(where);
class GlooCommunicator final : public Communicator {
 public:
  /// Meets the other ranks (returns once all have come and are connected); throws llmtrain::Error
  /// naming host:port when they do not come within the timeout or the store cannot be reached.
  static std::shared_ptr<GlooCommunicator> connect(const Rendezvous& where);
  ~GlooCommunicator() override;

  int rank() const override { return where_.rank; }
  int world_size() const override { return where_.world_size; }
  void all_reduce_sum(torch::Tensor& tensor) override;
  void reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) override;
  void all_gather(const torch::Tensor& input, torch::Tensor& output) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  void barrier() override;
  /// Marks the run as failed in the store, so that every rank's wait throws, then ends this process.
  [[noreturn]] void abort(int code) override;

  struct State;

 private:
  GlooCommunicator(const Rendezvous& where, std::unique_ptr<State> state);
  Rendezvous where_;
  std::unique_ptr<State> s_;
};

}  // namespace llmtrain::dist
