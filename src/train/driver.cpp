// What train and finetune share: the run folder's checks and the run itself, on every rank.
#include "llmtrain/train/driver.h"

#include <cstdio>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/train/checkpointer.h"
#include "llmtrain/train/trainer.h"
#include "run_folder.h"

namespace llmtrain::train {
namespace detail {
namespace {

// The names a run writes into its out_dir. A folder that holds one of them but is no run folder of
// llmtrain's is refused: those files are not ours to overwrite.
constexpr const char* kRunFiles[] = {"config.json", "metrics.jsonl", "loss.svg", "checkpoints", "tokenizer"};

// A run folder llmtrain wrote: its marker, or (from before markers) a complete checkpoint.
bool is_run_folder(const std::string& dir) {
  return fs::is_our_output(dir) || !Checkpointer::list(dir + "/checkpoints").empty();
}

}  // namespace

void check_run_folder(const TrainerConfig& c, bool force) {
  // The run's own copy of its tokenizer (a config read from the run folder names it) is no input.
  const std::string own = c.out_dir + "/tokenizer";
  const bool copy = !c.tokenizer.sha256.empty() && fs::absolute(c.tokenizer.path).rfind(fs::absolute(own), 0) == 0;
  fs::check_output(c.out_dir,
                   {"out_dir", {c.model.init_from, copy ? "" : c.tokenizer.path, c.data.train, c.data.val}, true});
  if (force || !fs::is_dir(c.out_dir) || is_run_folder(c.out_dir)) return;
  for (const char* f : kRunFiles)
    LLMTRAIN_CHECK(!fs::exists(c.out_dir + "/" + f), "out_dir ", c.out_dir, " holds ", f, ", which llmtrain did not ",
                   "write (the folder has no ", fs::kOutputMarker, " marker): choose another out_dir, or pass --force ",
                   "to train / finetune to write over it");
}

}  // namespace detail

int64_t run_training(const TrainerConfig& cfg, const RunOptions& options, std::shared_ptr<dist::Communicator> comm) {
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->world_size() : 1;
  try {
    if (rank == 0) {
      detail::check_run_folder(cfg, options.force);
      // --force adopts the folder as a run folder, so that the Trainer writes its files there.
      if (options.force && fs::is_dir(cfg.out_dir) && !fs::is_our_output(cfg.out_dir))
        fs::mark_output(cfg.out_dir, "run");
    }
    const bool used = fs::exists(cfg.out_dir + "/checkpoints") || fs::exists(cfg.out_dir + "/metrics.jsonl");
    LLMTRAIN_CHECK(options.resume || !used, "out_dir ", cfg.out_dir,
                   " already holds a run; pass --resume to continue it, or choose another out_dir");
    Trainer trainer(cfg, comm);
    const bool resumed = !options.resume || trainer.resume_if_possible();
    const bool say = rank == 0 && !cfg.train.quiet;
    if (say && !resumed)
      std::printf(used
                      ? "out_dir %s holds no complete checkpoint (its run stopped before the first one): starting over "
                        "from step 0\n"
                      : "no checkpoint in %s: starting from step 0\n",
                  cfg.out_dir.c_str());
    if (say) {
      int64_t trainable = 0;
      for (const auto& p : trainer.model().module().parameters())
        if (p.requires_grad()) trainable += p.numel();
      const std::string lora = cfg.peft.method == PeftMethod::kNone
                                   ? std::string()
                                   : std::string(cfg.peft.method == PeftMethod::kQLora ? " (QLoRA: " : " (LoRA: ") +
                                         std::to_string(trainable) + " trainable)";
      std::printf(
          "%s, %.1fM parameters%s%s%s; %lld tokens per step (%lld micro-steps%s); "
          "out_dir %s\n",
          trainer.model().spec().summary().c_str(), double(trainer.model().num_parameters()) / 1e6, lora.c_str(),
          cfg.model.init_from.empty() ? "" : " from ", cfg.model.init_from.c_str(),
          static_cast<long long>(world * trainer.grad_accum_steps() * cfg.train.batch_size * cfg.train.seq_len),
          static_cast<long long>(trainer.grad_accum_steps()),
          world > 1 ? (" on each of " + std::to_string(world) + " ranks").c_str() : "", cfg.out_dir.c_str());
    }
    const int64_t step = trainer.run();
    if (say)
      std::printf("done at step %lld; metrics in %s/metrics.jsonl, loss curves in %s/loss.svg\n",
                  static_cast<long long>(step), cfg.out_dir.c_str(), cfg.out_dir.c_str());
    return step;
  } catch (const std::exception& e) {
    if (world <= 1) throw;
    const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(world) + ": ",
                      what = describe(e);  // a communicator's errors name the rank already
    std::fprintf(stderr, "%s%s; ending every rank\n", what.rfind(who, 0) == 0 ? "" : who.c_str(), what.c_str());
    std::fflush(stderr);
    comm->abort(1);
    throw;  // not reached: abort ends the process
  }
}

}  // namespace llmtrain::train
