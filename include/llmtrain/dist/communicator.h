// How the ranks of a data-parallel run talk: a sum over all ranks and a broadcast from one. The
// Trainer takes one (or none, for a single process) and uses it to start every rank from rank 0's
// weights, to average gradients after the micro-batches of a step, to average the logged and
// evaluated losses, and to agree on stopping. Implementations over MPI (CPU tensors) and NCCL (CUDA
// tensors), and the bucketed, backward-overlapped DataParallel, build on this interface.
#pragma once

#include <torch/types.h>

#include <cstdlib>

namespace llmtrain::dist {

/// Collective operations over the ranks of one run; every rank must make the same calls in the same
/// order.
///   comm.all_reduce_sum(grad);  // every rank now holds the sum of all ranks' grad
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Replaces `tensor` (contiguous) on every rank with the elementwise sum over all ranks.
  virtual void all_reduce_sum(torch::Tensor& tensor) = 0;
  /// Replaces `tensor` (contiguous) on every rank with rank `root`'s.
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  /// Returns once every rank has called it.
  virtual void barrier() = 0;
  /// Ends every rank of the run with exit status `code`, so that no rank waits forever in a collective
  /// for one that failed. The default ends this process alone.
  [[noreturn]] virtual void abort(int code);
};

inline void Communicator::abort(int code) { std::_Exit(code); }

}  // namespace llmtrain::dist
