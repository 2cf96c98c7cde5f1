// What a run says about itself: <out_dir>/metrics.jsonl (a line per step, evaluation and sample), the
// progress line (loss, learning rate, tokens/s, MFU, ETA), and the loss curves (<out_dir>/loss.svg).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>

#include "llmtrain/eval/tasks.h"

namespace llmtrain::train {

/// One optimizer step's record (also a metrics.jsonl line).
struct StepRecord {
  int64_t step = 0;  // steps done after this one
  double loss = 0, lr = 0, grad_norm = 0, tokens_per_s = 0, elapsed_s = 0;
  double mfu = 0;         // model FLOPs utilization on a GPU of known peak; 0 elsewhere
  double loss_scale = 1;  // fp16: the loss scale after this step (halved when it was skipped); else 1
  bool skipped = false;
};

/// Writes a run's metrics and progress. A step's time is its own: from the end of the step before (or
/// of the pause after it: an evaluation, sample or checkpoint) to the end of its work.
///   MetricsLogger log({.out_dir = "runs/mine", .max_steps = 100, .step_tokens = 8192});
///   StepRecord r{.step = 1, .loss = 3.2, .lr = 6e-4};  log.step(r);  // fills r's speed, prints, writes
class MetricsLogger {
 public:
  struct Options {
    std::string out_dir;         // metrics.jsonl and loss.svg go here
    bool write = true;           // false: write nothing (ranks past the first)
    bool print = true;           // false: print nothing (train.quiet, ranks past the first)
    int64_t max_steps = 0;       // the run's last step: progress and ETA
    int64_t step_tokens = 0;     // tokens of one optimizer step over all ranks
    double flops_per_token = 0;  // the model's training FLOPs per token (MFU)
    double peak_flops = 0;       // of all the run's devices together; 0: unknown, no MFU
    bool loss_scale = false;     // fp16: each step's line has its loss scale
    int64_t eval_every = 0, sample_every = 0, checkpoint_every = 0;  // the pauses still due count in the ETA
  };
  enum class Pause { kEval, kSample, kCheckpoint };

  explicit MetricsLogger(Options options);

  /// Starts the clock (construction starts it too): the next step's time, and elapsed_s, count from here.
  void start();

  /// Records a step whose work ended at `done` (default: now): fills r.tokens_per_s, r.elapsed_s and
  /// r.mfu, appends its line to metrics.jsonl and updates the progress line (a terminal's line is
  /// rewritten in place; elsewhere a line every max_steps / 20 steps).
  void step(StepRecord& r, std::optional<std::chrono::steady_clock::time_point> done = std::nullopt);
  /// Runs `body` as a pause of kind `kind`: its time is no step's, and the ETA counts the ones still due.
  template <typename Body>
  void pause(Pause kind, Body&& body) {
    const auto t0 = std::chrono::steady_clock::now();
    body();
    end_pause(kind, t0);
  }
  void eval(int64_t step, double val_loss);
  /// An evaluation task's scores: a line {"type": "eval_task", "step", "primary": its first score's
  /// name, then TaskResult::json()'s fields}, and the task's line printed.
  void eval_task(int64_t step, const eval::TaskResult& result);
  void sample(int64_t step, const std::string& text);
  /// Prints a line of its own (after the progress line, when one is open).
  void say(const std::string& line);
  /// Ends an open progress line.
  void end_line();
  /// Keeps the records of steps up to `last`: those after it belong to a run that stopped, and the
  /// resumed run writes them anew.
  void keep_through(int64_t last);
  /// Seconds of earlier runs that this one resumes; elapsed_s counts from there.
  void set_elapsed_before(double seconds) { elapsed_before_ = seconds; }
  double elapsed() const;
  /// Draws metrics.jsonl's loss curves into loss.svg.
  void write_loss_curves() const;

 private:
  void append(const std::string& json_line) const;
  void end_pause(Pause kind, std::chrono::steady_clock::time_point t0);
  std::string path() const { return o_.out_dir + "/metrics.jsonl"; }

  Options o_;
  bool tty_ = false, line_open_ = false;
  int64_t print_every_ = 1;
  std::chrono::steady_clock::time_point start_, last_;
  double elapsed_before_ = 0;
  // The progress line's tok/s and ETA: the seconds of the steps since the line was last printed (a
  // terminal: the last print_every steps), and of every step this process did; pauses apart.
  std::deque<double> window_;
  double window_s_ = 0, steps_s_ = 0;
  int64_t steps_timed_ = 0;
  double pause_s_[3] = {0, 0, 0};  // the last of each kind, for the ETA
};

}  // namespace llmtrain::train
