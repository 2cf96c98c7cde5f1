// Data parallelism over a Communicator: every rank holds the whole model, runs its share of the batch,
// and takes the same optimizer step on gradients averaged over the ranks. Gradients live in flat
// buckets (each parameter's .grad a view into one), and a bucket's average starts as soon as backward
// has accumulated its last gradient, so that on NCCL the communication runs beside the rest of the
// backward. Buckets are filled from the last parameter back (the order backward produces them) and
// reduced strictly in bucket order on every rank.
// ZeRO-1 (`shard_optimizer`): a bucket is reduce-scattered instead, so that rank r holds the average of
// part r of it alone; r's optimizer updates those slices of the parameters (and keeps AdamW state for
// them alone), and gather_parameters() brings every rank's updated slices into every rank's parameters.
#pragma once

#include <torch/types.h>

#include <memory>
#include <vector>

#include "llmtrain/dist/communicator.h"

namespace llmtrain::dist {

struct DataParallelOptions {
  int64_t bucket_bytes = 25 * 1024 * 1024;  // the gradients one reduction carries, at most (one larger tensor alone)
  bool shard_optimizer = false;             // ZeRO-1
};

/// ZeRO-1: a run of one parameter's elements (flattened) that this rank updates.
struct ShardSlice {
  size_t param;  // index among the parameters that take part
  int64_t offset, length;
  torch::Tensor grad;   // (length): the average over the ranks, after finish()
  torch::Tensor value;  // (length), the parameter's dtype: what gather_parameters() sends from this rank
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
  /// gradient), waits for all, and leaves each .grad the mean over the ranks (ZeRO-1: each slice's
  /// grad; the .grad tensors then hold this rank's own sums).
  void finish();

  /// ZeRO-1: this rank's slices, in bucket order (empty without sharding).
  const std::vector<ShardSlice>& shard() const;
  /// ZeRO-1, after the optimizer has written every slice's value: all ranks' values into the parameters.
  void gather_parameters();
  /// ZeRO-1: every slice's value read from the parameters (done at construction and after
  /// broadcast_parameters; again after loading weights).
  void load_shard_values();

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
