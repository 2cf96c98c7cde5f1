// The ranks of a run over NCCL, for CUDA tensors: one GPU a rank. The NCCL unique id travels over a
// bootstrap communicator (MpiCommunicator under mpirun); without one the run is a single rank.
// Collectives run on a stream of the communicator's own, ordered after the work queued on the
// caller's current stream by an event; the caller's stream waits for a collective's end (all but
// start_all_reduce_avg, whose end wait() marks). CPU tensors are accepted too, through a device copy
// (the Trainer's scalars). A watchdog thread ends the run (as abort() does) when a collective has not
// finished within the timeout or NCCL reports an asynchronous error, so that no rank hangs.
#pragma once

#include <chrono>
#include <memory>

#include "llmtrain/dist/communicator.h"

namespace llmtrain::dist {

///   auto nccl = llmtrain::dist::NcclCommunicator::create(llmtrain::dist::MpiCommunicator::world(),
///                                                        torch::Device(torch::kCUDA, local_rank()));
class NcclCommunicator final : public Communicator {
 public:
  /// Joins the ranks of `bootstrap` (null or one rank: a single-rank run) on `device`, which becomes
  /// the current CUDA device; a collective that has not finished `timeout` after it was queued ends
  /// the run. Throws llmtrain::Error when llmtrain was built without CUDA.
  static std::shared_ptr<NcclCommunicator> create(std::shared_ptr<Communicator> bootstrap, torch::Device device,
                                                  std::chrono::milliseconds timeout = dist::timeout());
  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  void all_reduce_sum(torch::Tensor& tensor) override;
  void all_reduce_avg(torch::Tensor& tensor) override;
  void reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) override;
  void all_gather(const torch::Tensor& input, torch::Tensor& output) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  void barrier() override;
  void start_all_reduce_avg(torch::Tensor& tensor) override;
  void start_reduce_scatter_avg(const torch::Tensor& input, torch::Tensor& output) override;
  void wait() override;
  /// ncclCommAbort, then the bootstrap's abort (MPI_Abort: every rank ends).
  [[noreturn]] void abort(int code) override;

  struct State;

 private:
  NcclCommunicator(int rank, int size, std::unique_ptr<State> state);
  int rank_, size_;
  std::unique_ptr<State> s_;
};

}  // namespace llmtrain::dist
