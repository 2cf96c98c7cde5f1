// The Trainer composes the pieces of a run: GPT-2 from the config (or a checkpoint's weights, to fine-
// tune), the mixed-precision optimizer, the train and val batches (shards or SFT JSONL), gradient
// accumulation to total_batch_tokens, data parallelism through a dist::Communicator, evaluation,
// samples, metrics (<out_dir>/metrics.jsonl) with loss curves (<out_dir>/loss.svg), a progress line,
// and checkpoints that resume exactly. A checkpoint is a
// folder <out_dir>/checkpoints/step_XXXXXXXX/ written under a temporary name, flushed and renamed, so
// a crash never leaves a half checkpoint under a real name; SIGINT and SIGTERM finish the step, write
// a checkpoint and end the run cleanly.
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
#include "llmtrain/nn/gpt2.h"
#include "llmtrain/optim/optimizer.h"
#include "llmtrain/train/config.h"

namespace llmtrain::train {

/// One optimizer step's record (also a metrics.jsonl line).
struct StepRecord {
  int64_t step = 0;  // steps done after this one
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, elapsed_s = 0;
  double mfu = 0;  // model FLOPs utilization on a GPU of known peak; 0 elsewhere
  double loss_scale = 1;  // fp16: the loss scale after this step (halved when it was skipped); else 1
  bool skipped = false;
};

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

  int64_t step() const;
  nn::GPT2& model();
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

/// The model of a checkpoint: `path` is a checkpoint folder (…/checkpoints/step_XXXXXXXX) or a run's
/// out_dir, whose newest complete checkpoint is taken. Throws llmtrain::Error naming what is missing.
///   auto model = llmtrain::train::load_checkpoint_model("runs/sotu_gpt2_124m");
nn::GPT2 load_checkpoint_model(const std::string& path);

/// The model at `path`, whatever its kind: a Hugging Face folder (io::load_hf_gpt2), an llm.c model
/// file ending in .bin (io::load_llmc_gpt2), or a checkpoint as for load_checkpoint_model.
///   auto model = llmtrain::train::load_model("gpt2");  // a save_pretrained folder
nn::GPT2 load_model(const std::string& path);

/// Writes `model` alone (no optimizer state: a run starts from it, it does not resume) as a checkpoint
/// folder that load_checkpoint_model, model.init_from and finetune_gpt2 --from read, through
/// fs::write_dir_atomic (`options`: what it may replace). `tokenizer`'s files are copied in and its
/// config names them; without one, the config names GPT-2's tokenizer (found as load_tokenizer finds it).
void save_model_checkpoint(nn::GPT2& model, const std::string& dir, const fs::OutputOptions& options = {},
                           const std::optional<TokenizerConfig>& tokenizer = std::nullopt);

/// io::save_hf_gpt2 with `tokenizer` beside the weights, as transformers' AutoTokenizer reads it: GPT-2
/// BPE as vocab.json + merges.txt (GPT2Tokenizer), SentencePiece as tokenizer.model (LlamaTokenizer,
/// adding no bos or eos, as llmtrain encodes), with tokenizer_config.json and special_tokens_map.json;
/// config.json's bos_token_id and eos_token_id are the tokenizer's end-of-text id.
///   llmtrain::train::save_hf_model(model, "exported", {}, llmtrain::train::model_tokenizer("runs/demo/model"));
void save_hf_model(nn::GPT2& model, const std::string& dir, const fs::OutputOptions& options = {},
                   const std::optional<TokenizerConfig>& tokenizer = std::nullopt);

/// The tokenizer of the model at `path` (as load_model reads it): a checkpoint's or run folder's own copy
/// (its path inside the folder, its sha256 checked when loaded), a Hugging Face folder's tokenizer.model
/// or vocab.json + merges.txt; none for an llm.c file or a folder without tokenizer files.
///   auto tok = llmtrain::train::load_tokenizer(*llmtrain::train::model_tokenizer("runs/demo/model"));
std::optional<TokenizerConfig> model_tokenizer(const std::string& path);

/// The configuration a checkpoint was trained with; `path` as for load_checkpoint_model.
TrainerConfig load_checkpoint_config(const std::string& path);

/// The configuration of a fine-tuning run: the JSON file `config_path` (data, tokenizer, train, eval,
/// ... of the new run) with the model of `from`, a checkpoint or a Hugging Face folder (its shape; the
/// file may set only model.dropout) and model.init_from = `from`; the tokenizer section is the
/// checkpoint's (GPT-2's for a Hugging Face folder) unless the file has one; then `overrides`. Throws llmtrain::Error naming the file or key at fault.
///   auto cfg = llmtrain::train::finetune_config("runs/base", "examples/configs/finetune_sft.json", {});
TrainerConfig finetune_config(const std::string& from, const std::string& config_path,
                              const std::vector<std::string>& overrides = {});

/// How run_training starts.
struct RunOptions {
  bool resume = false;  // continue from out_dir's newest complete checkpoint (from step 0 when it has none)
  bool force = false;   // write into an out_dir that holds files of a run's names that llmtrain did not write
};

/// What train_gpt2 and finetune_gpt2 do: refuse an out_dir that already holds a run unless
/// `options.resume`, and one that is not a run folder of llmtrain's but holds files of its names unless
/// `options.force`; resume from its newest checkpoint when `options.resume` (from step 0 when it has
/// none); print the run's shape (rank 0); train. Returns the number of the last step done. `comm`: the
/// ranks of the run (dist::from_environment(): the mpirun or torchrun job this process is in, or none);
/// when one rank fails, it says why and ends every rank (Communicator::abort), so none waits for it forever.
int64_t run_training(const TrainerConfig& config, const RunOptions& options = {},
                     std::shared_ptr<dist::Communicator> comm = dist::from_environment());

/// ZeRO-1's wiring: `opt` updates `dp`'s shard (built with shard_optimizer) and sums its norm over
/// `comm`; each step ends with dp's gather. Before the first step.
void shard_optimizer(optim::MixedPrecisionOptimizer& opt, dist::DataParallel& dp,
                     std::shared_ptr<dist::Communicator> comm);

}  // namespace llmtrain::train
