// The driver train and finetune share: a run started from its config, on every rank.
#pragma once

#include <cstdint>
#include <memory>

#include "llmtrain/dist/communicator.h"
#include "llmtrain/dist/launch.h"
#include "llmtrain/train/config.h"

namespace llmtrain::train {

/// How run_training starts.
struct RunOptions {
  bool resume = false;  // continue from out_dir's newest complete checkpoint (from step 0 when it has none)
  bool force = false;   // write into an out_dir that holds files of a run's names that llmtrain did not write
};

/// What train and finetune do: refuse an out_dir that already holds a run unless
/// `options.resume`, and one that is not a run folder of llmtrain's but holds files of its names unless
/// `options.force`; resume from its newest checkpoint when `options.resume` (from step 0 when it has
/// none); print the run's shape (rank 0); train. Returns the number of the last step done. `comm`: the
/// ranks of the run (dist::from_environment(): the mpirun or torchrun job this process is in, or none);
/// when one rank fails, it says why and ends every rank (Communicator::abort), so none waits for it forever.
int64_t run_training(const TrainerConfig& config, const RunOptions& options = {},
                     std::shared_ptr<dist::Communicator> comm = dist::from_environment());

}  // namespace llmtrain::train
