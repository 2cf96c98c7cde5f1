// The Trainer composes the pieces of a run: GPT-2 from the config, the mixed-precision optimizer, the
// train and val loaders, gradient accumulation to total_batch_tokens, evaluation, metrics
// (<out_dir>/metrics.jsonl), a progress line, and checkpoints that resume exactly. A checkpoint is a
// folder <out_dir>/checkpoints/step_XXXXXXXX/ written under a temporary name, flushed and renamed, so
// a crash never leaves a half checkpoint under a real name; SIGINT and SIGTERM finish the step, write
// a checkpoint and end the run cleanly.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "llmtrain/nn/gpt2.h"
#include "llmtrain/train/config.h"

namespace llmtrain::train {

/// One optimizer step's record (also a metrics.jsonl line).
struct StepRecord {
  int64_t step = 0;  // steps done after this one
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, elapsed_s = 0;
  bool skipped = false;
};

/// Trains GPT-2 as a TrainerConfig says.
///   llmtrain::train::Trainer trainer(TrainerConfig::load("run.json"));
///   trainer.resume_if_possible();  trainer.run();
class Trainer {
 public:
  /// Builds the model, optimizer and loaders; throws llmtrain::Error for a config the data or the
  /// device cannot serve (no shards, a total batch that is not a multiple of one batch, no CUDA).
  explicit Trainer(TrainerConfig config);
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

  int64_t step() const;
  nn::GPT2& model();
  const TrainerConfig& config() const;
  int64_t grad_accum_steps() const;
  /// Called after every step (tests and examples watch progress or stop a run through it).
  void on_step(std::function<void(const StepRecord&)> callback);
  /// Asks the run to stop after the current step, as SIGINT does.
  void request_stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The model of a checkpoint: `path` is a checkpoint folder (…/checkpoints/step_XXXXXXXX) or a run's
/// out_dir, whose newest complete checkpoint is taken. Throws llmtrain::Error naming what is missing.
///   auto model = llmtrain::train::load_checkpoint_model("runs/sotu_gpt2_124m");
nn::GPT2 load_checkpoint_model(const std::string& path);

}  // namespace llmtrain::train
