// A run's checkpoints on disk: <run_dir>/checkpoints/step_XXXXXXXX/ folders, each written under a
// temporary name (step_XXXXXXXX.tmp.PID), its state.json last, then renamed, so that a crash never
// leaves a half checkpoint under a real name. The Checkpointer owns that format (naming, atomic
// writes, the newest `keep` kept, listing, stale folders, the ranks' part in a save); what goes into a
// checkpoint is its caller's (the Trainer's model, optimizer, generators and data position).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "llmtrain/core/fs.h"
#include "llmtrain/dist/communicator.h"

namespace llmtrain::train {

/// Writes and finds the checkpoints of one run folder.
///   Checkpointer ckpt("runs/mine", /*keep=*/2);
///   ckpt.save(step, {.shared = [&](const std::string& dir) { save_tensors(model, dir + "/model.pt"); },
///                    .state_json = [&] { return state.dump(); }});
///   if (auto dir = ckpt.newest()) torch::load(model, *dir + "/model.pt");
class Checkpointer {
 public:
  /// What one save writes into the checkpoint folder (all three run on rank 0; `per_rank` on every rank).
  struct Parts {
    std::function<void(const std::string& dir)> shared;    // rank 0: the files of the whole run
    std::function<void(const std::string& dir)> per_rank;  // every rank its own files (optional); the
                                                           // folder must lie on a filesystem all ranks share
    std::function<std::string()> state_json;               // rank 0: state.json, written last
  };

  /// `run_dir`/checkpoints holds the checkpoints; the newest `keep` are kept. `comm`: the run's ranks
  /// (null: one process); every rank calls save().
  explicit Checkpointer(std::string run_dir, int64_t keep = 2, std::shared_ptr<dist::Communicator> comm = nullptr);

  /// <run_dir>/checkpoints.
  const std::string& dir() const { return dir_; }
  /// Complete checkpoints (a step_XXXXXXXX folder with its state.json) under `dir`, oldest first.
  static std::vector<std::pair<int64_t, std::string>> list(const std::string& dir);
  /// The newest complete checkpoint of this run, if any.
  std::optional<std::string> newest() const;
  /// Removes the temporary folders a crash or a failed save left (ours by name and place), each said.
  void remove_stale() const;
  /// Writes the checkpoint of `step` (replacing one of the same step whole), then removes all but the
  /// newest `keep`. A failed save (a full disk) removes its temporary folder and leaves the earlier
  /// checkpoints alone; the error is thrown. A collective when the run has several ranks.
  void save(int64_t step, const Parts& parts);
  /// The step of the newest checkpoint saved or resumed from (-1: none yet).
  int64_t saved_step() const { return saved_step_; }
  void set_saved_step(int64_t step) { saved_step_ = step; }

 private:
  std::string dir_;
  int64_t keep_;
  std::shared_ptr<dist::Communicator> comm_;
  int64_t saved_step_ = -1;
};

/// The checkpoint folder `path` names: itself (it holds state.json), or a run folder's newest complete
/// checkpoint. Throws llmtrain::Error when it is neither.
std::string checkpoint_dir(const std::string& path);

}  // namespace llmtrain::train
