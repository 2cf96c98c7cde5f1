// Data parallelism over a Communicator: every rank holds the whole model, runs its share of the batch,
// and takes the same optimizer step on gradients averaged over the ranks. Gradients live in flat
// buckets (each parameter's .grad a view into one), and a bucket's average starts as soon as backward
// has accumulated its last gradient, so that on NCCL the communication runs beside the rest of the
// backward. Buckets are filled from the last parameter back (the order backward produces them) and
// reduced strictly in bucket order on every rank.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "llmtrain/dist/communicator.h"

namespace llmtrain::dist {

struct DataParallelOptions {
  int64_t bucket_bytes = 25 * 1024 * 1024;  // the gradients one reduction carries, at most (one larger tensor alone)
};

/// A step with accumulation:
///   dist::DataParallel dp(model->parameters(), comm);
///   dp.broadcast_parameters();              // once: every rank starts from rank 0's weights
///   dp.zero_grad();
///   for (int m = 0; m < accum; ++m) {
///     dp.set_sync(m == accum - 1);          // only the last backward communicates
///     loss(m).backward();
///   }
///   dp.finish();                            // every .grad is now the mean over the ranks
///   optimizer.step();
class DataParallel {
 public:
  /// `params`: those that require a gradient take part (same list, same order, on every rank).
  DataParallel(const std::vector<torch::Tensor>& params, std::shared_ptr<Communicator> comm,
               DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  /// Every parameter gets rank `root`'s values.
  void broadcast_parameters(int root = 0);
  /// Before a step's first backward: the buckets zeroed and every .grad a view into its bucket (an
  /// optimizer that reset the gradients after its step does not matter).
  void zero_grad();
  /// Whether the next backward is the step's last, whose gradients are reduced (default true).
  void set_sync(bool sync);
  /// After the step's last backward: starts the buckets not started yet (parameters that got no
  /// gradient), waits for all, and leaves each .grad the mean over the ranks.
  void finish();

  int64_t num_buckets() const;
  /// The bucket of each parameter that takes part, in the order given.
  std::vector<int64_t> bucket_of_parameters() const;
  /// The buckets started during the last synced backward, before finish() (how much overlapped).
  int64_t started_during_backward() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain::dist
