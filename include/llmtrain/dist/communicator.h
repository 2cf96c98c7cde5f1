// How the ranks of a data-parallel run talk: sums and means over all ranks, their scattered and
// gathered forms, and a broadcast from one. The Trainer takes one (or none, for a single process) and
// uses it, through dist::DataParallel, to start every rank from rank 0's weights and to average the
// gradients of a step, and itself to average the logged and evaluated losses and to agree on
// stopping. Implementations: MPI (CPU tensors, dist/mpi.h), Gloo for a torchrun-style launch (CPU
// tensors, dist/gloo.h) and NCCL (CUDA tensors, dist/nccl.h).
#pragma once

#include <torch/types.h>

#include <chrono>
#include <cstdlib>

namespace llmtrain::dist {

/// Collective operations over the ranks of one run; every rank must make the same calls in the same
/// order. Tensors are contiguous; an implementation takes CPU tensors (MPI) or CUDA tensors (NCCL).
///   comm.all_reduce_sum(grad);  // every rank now holds the sum of all ranks' grad
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int world_size() const = 0;
  /// Replaces `tensor` on every rank with the elementwise sum over all ranks.
  virtual void all_reduce_sum(torch::Tensor& tensor) = 0;
  /// Replaces `tensor` on every rank with the elementwise mean over all ranks.
  virtual void all_reduce_avg(torch::Tensor& tensor);
  /// Replaces `tensor` on every rank with the elementwise maximum over all ranks (through all_gather:
  /// for small tensors, such as fp8's amaxes).
  void all_reduce_max(torch::Tensor& tensor);
  /// `input` (world_size x n elements) summed over the ranks; rank r's `output` (n) gets part r of it.
  virtual void reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) = 0;
  /// `output` (world_size x n) on every rank: part r is rank r's `input` (n).
  virtual void all_gather(const torch::Tensor& input, torch::Tensor& output) = 0;
  /// Replaces `tensor` on every rank with rank `root`'s.
  virtual void broadcast(torch::Tensor& tensor, int root) = 0;
  /// Returns once every rank has called it.
  virtual void barrier() = 0;
  /// Starts all_reduce_avg(tensor), which may still run after the call (NCCL: on a stream of its own,
  /// after the work queued so far); `tensor` holds the mean once wait() has returned (for CUDA tensors,
  /// for the work queued on the current stream after wait()). Untouched by the caller until then. The
  /// default reduces at once.
  virtual void start_all_reduce_avg(torch::Tensor& tensor) { all_reduce_avg(tensor); }
  /// Starts reduce_scatter_sum(input, output) divided by the world size, under start_all_reduce_avg's
  /// terms (wait() ends it; both tensors untouched until then). The default reduces at once.
  virtual void start_reduce_scatter_avg(const torch::Tensor& input, torch::Tensor& output) {
    reduce_scatter_sum(input, output);
    if (world_size() > 1) output.div_(double(world_size()));
  }
  /// Orders what follows after every collective started.
  virtual void wait() {}
  /// Ends every rank of the run with exit status `code`, so that no rank waits forever in a collective
  /// for one that failed. The default ends this process alone.
  [[noreturn]] virtual void abort(int code);
};

inline void Communicator::all_reduce_avg(torch::Tensor& tensor) {
  all_reduce_sum(tensor);
  if (world_size() > 1) tensor.div_(double(world_size()));
}

inline void Communicator::all_reduce_max(torch::Tensor& tensor) {
  if (world_size() == 1 || tensor.numel() == 0) return;
  torch::Tensor all = tensor.new_empty({world_size(), tensor.numel()});
  all_gather(tensor.contiguous().view({-1}), all);
  tensor.copy_(all.amax(0).view_as(tensor));
}

inline void Communicator::abort(int code) { std::_Exit(code); }

/// How long a rank waits for the others in one collective or rendezvous before it gives up with an
/// error: LLMTRAIN_DIST_TIMEOUT seconds, 600 when unset. Throws llmtrain::Error when it is not a
/// positive number.
std::chrono::milliseconds timeout();

}  // namespace llmtrain::dist
