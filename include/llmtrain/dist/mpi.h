// The ranks of an mpirun job over MPI, for CPU tensors (dist/launch.h finds the job a program was
// started in). MPI is initialised once per process, on first use, and finalised at exit; every collective is a
// blocking MPI call on MPI_COMM_WORLD.
#pragma once

#include <memory>

#include "llmtrain/dist/communicator.h"

namespace llmtrain::dist {

/// Collectives over MPI_COMM_WORLD for CPU tensors: float32, float64 and int64 directly, bfloat16 and
/// float16 summed in float32. abort() ends the whole job (MPI_Abort).
///   auto comm = llmtrain::dist::MpiCommunicator::world();
///   comm->all_reduce_sum(grad);
class MpiCommunicator final : public Communicator {
 public:
  /// The job's communicator; throws llmtrain::Error when llmtrain was built without MPI.
  static std::shared_ptr<MpiCommunicator> world();

  int rank() const override { return rank_; }
  int world_size() const override { return size_; }
  void all_reduce_sum(torch::Tensor& tensor) override;
  void reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) override;
  void all_gather(const torch::Tensor& input, torch::Tensor& output) override;
  void broadcast(torch::Tensor& tensor, int root) override;
  void barrier() override;
  [[noreturn]] void abort(int code) override;

 private:
  MpiCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank_, size_;
};

/// Whether llmtrain was built with MPI.
bool mpi_available();

}  // namespace llmtrain::dist
