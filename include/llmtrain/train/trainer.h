// The Trainer composes the pieces of a run: GPT-2 from the config (or a checkpoint's weights, to fine-
// tune), the mixed-precision optimizer, the train and val batches (shards or SFT JSONL), the step
// (gradient accumulation to total_batch_tokens, CUDA graphs, data parallelism through a
// dist::Communicator), evaluation, samples, the MetricsLogger (metrics.jsonl, the progress line, loss.svg)
// and the Checkpointer (checkpoints that resume exactly). SIGINT and SIGTERM finish the step, write a
// checkpoint and end the run cleanly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "llmtrain/core/fs.h"
#include "llmtrain/dist/communicator.h"
#include "llmtrain/dist/data_parallel.h"
#include "llmtrain/dist/launch.h"
#include "llmtrain/nn/causal_lm.h"
#include "llmtrain/optim/optimizer.h"
#include "llmtrain/train/config.h"
#include "llmtrain/train/driver.h"
#include "llmtrain/train/metrics.h"
#include "llmtrain/train/model_files.h"

namespace llmtrain::train {

/// Trains GPT-2 as a TrainerConfig says.
///   llmtrain::train::Trainer trainer(TrainerConfig::load("run.json"));
///   trainer.resume_if_possible();  trainer.run();
class Trainer {
 public:
  /// Builds the model, optimizer and loaders; throws llmtrain::Error for a config the data or the
  /// device cannot serve (no shards, a total batch that is not a multiple of one batch, no CUDA).
  /// With a communicator of R ranks, each rank reads its share of every batch, gradients and losses
  /// are averaged over the ranks, and rank 0 alone writes metrics, samples and checkpoints.
  explicit Trainer(TrainerConfig config, std::shared_ptr<dist::Communicator> comm = nullptr);
  ~Trainer();

  /// Loads the newest complete checkpoint under out_dir, if any; true when one was loaded. Throws
  /// llmtrain::Error for a checkpoint that is truncated, foreign, or of another model shape.
  bool resume_if_possible();
  /// Trains until max_steps (or a signal). Returns the number of the last step done.
  int64_t run();
  /// Writes a checkpoint of the current state now.
  void save_checkpoint();
  /// Mean loss over eval.batches batches of the val data (the train data when no val glob is set).
  double evaluate();
  /// The scores of eval.tasks (each rank scores its share; the sums are taken over ranks), in their order.
  std::vector<eval::TaskResult> evaluate_tasks();

  int64_t step() const;
  /// The model being trained (its module(): parameters, train()/eval()).
  nn::CausalLM& model();
  /// The same, shared (for a Generator, or to save it with model_files.h).
  std::shared_ptr<nn::CausalLM> shared_model();
  /// The optimizer loop (its AdamW state, masters, loss scale).
  optim::MixedPrecisionOptimizer& optimizer();
  const TrainerConfig& config() const;
  int64_t grad_accum_steps() const;
  /// Called with every step's record (tests and examples watch progress or stop a run through it). On
  /// one rank a record is written once the next step's forward and backward are queued, so that the
  /// device never waits for the host; steps that evaluate, sample, checkpoint or end the run, and
  /// every step on several ranks, are recorded at once.
  void on_step(std::function<void(const StepRecord&)> callback);
  /// Asks the run to stop after the step recorded last (from the callback: the step it was called
  /// with; the queued next step is dropped, its batches and random numbers given back), as SIGINT does.
  void request_stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// ZeRO-1's wiring: `opt` updates `dp`'s shard (built with shard_optimizer) and sums its norm over
/// `comm`; each step ends with dp's gather. Before the first step.
void shard_optimizer(optim::MixedPrecisionOptimizer& opt, dist::DataParallel& dp,
                     std::shared_ptr<dist::Communicator> comm);

}  // namespace llmtrain::train
