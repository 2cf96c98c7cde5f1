#include "llmtrain/train/metrics.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "../core/json.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/train/plot.h"

namespace llmtrain::train {
namespace {

using Json = json::Json;

std::string format_duration(double s) {
  char buf[32];
  const long t = long(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

}  // namespace

MetricsLogger::MetricsLogger(Options options)
    : o_(std::move(options)),
      tty_(o_.print && ::isatty(STDOUT_FILENO)),
      print_every_(std::max<int64_t>(1, o_.max_steps / 20)),
      start_(std::chrono::steady_clock::now()),
      last_(start_) {}

void MetricsLogger::start() { start_ = last_ = std::chrono::steady_clock::now(); }

double MetricsLogger::elapsed() const {
  return elapsed_before_ + std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
}

void MetricsLogger::append(const std::string& json_line) const {
  if (o_.write) fs::append_file(path(), json_line + "\n");
}

void MetricsLogger::step(StepRecord& r, std::optional<std::chrono::steady_clock::time_point> done_at) {
  const auto now = std::chrono::steady_clock::now();
  const auto done = done_at.value_or(now);
  const double dt = std::max(1e-9, std::chrono::duration<double>(done - last_).count());
  last_ = done;
  r.tokens_per_s = double(o_.step_tokens) / dt;
  r.elapsed_s = elapsed_before_ + std::chrono::duration<double>(now - start_).count();
  if (o_.peak_flops > 0) r.mfu = r.tokens_per_s * o_.flops_per_token / o_.peak_flops;
  Json line = {{"type", "train"},          {"step", r.step},
               {"loss", r.loss},           {"lr", r.lr},
               {"grad_norm", r.grad_norm}, {"tokens_per_s", r.tokens_per_s},
               {"elapsed_s", r.elapsed_s}};
  if (o_.peak_flops > 0) line["mfu"] = r.mfu;
  if (r.skipped) line["skipped"] = true;
  if (o_.loss_scale) line["loss_scale"] = r.loss_scale;
  append(line.dump());

  window_.push_back(dt);
  window_s_ += dt;
  if (tty_ && int64_t(window_.size()) > print_every_) {
    window_s_ -= window_.front();
    window_.pop_front();
  }
  steps_s_ += dt;
  ++steps_timed_;
  // The rest of the run at this process's pace: its steps, and its evaluations, samples and checkpoints
  // still due, each as long as the last one.
  const int64_t left = o_.max_steps - r.step;
  const auto due_after = [&](int64_t every) { return every > 0 ? o_.max_steps / every - r.step / every : 0; };
  const double eta = steps_s_ / double(steps_timed_) * double(left) +
                     pause_s_[int(Pause::kEval)] * double(due_after(o_.eval_every)) +
                     pause_s_[int(Pause::kSample)] * double(due_after(o_.sample_every)) +
                     pause_s_[int(Pause::kCheckpoint)] * double(due_after(o_.checkpoint_every));
  const double shown_tps = double(o_.step_tokens) * double(window_.size()) / window_s_;
  char progress[192];
  int n = std::snprintf(progress, sizeof progress, "step %lld/%lld | loss %.4f | lr %.2e | %.1fK tok/s",
                        static_cast<long long>(r.step), static_cast<long long>(o_.max_steps), r.loss, r.lr,
                        shown_tps / 1e3);
  if (o_.peak_flops > 0) n += std::snprintf(progress + n, sizeof progress - n, " | MFU %.1f%%", 100 * r.mfu);
  std::snprintf(progress + n, sizeof progress - n, " | ETA %s", format_duration(eta).c_str());
  const bool due = r.step % print_every_ == 0 || r.step == o_.max_steps;
  if (tty_) {
    std::printf("\r%-110s", progress);
    line_open_ = true;
  } else if (o_.print && due) {
    std::printf("%s\n", progress);
  }
  if (!tty_ && due) {  // the next line averages anew
    window_.clear();
    window_s_ = 0;
  }
  std::fflush(stdout);
}

void MetricsLogger::end_pause(Pause kind, std::chrono::steady_clock::time_point t0) {
  const auto t1 = std::chrono::steady_clock::now();
  pause_s_[int(kind)] = std::chrono::duration<double>(t1 - t0).count();
  last_ = std::max(last_, t1);
}

void MetricsLogger::end_line() {
  if (line_open_) std::printf("\n");
  line_open_ = false;
}

void MetricsLogger::say(const std::string& line) {
  if (!o_.print) return;
  end_line();
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void MetricsLogger::eval(int64_t step, double val_loss) {
  append(Json{{"type", "eval"}, {"step", step}, {"val_loss", val_loss}}.dump());
  char buf[96];
  std::snprintf(buf, sizeof buf, "step %lld: val loss %.4f", static_cast<long long>(step), val_loss);
  say(buf);
}

void MetricsLogger::eval_task(int64_t step, const eval::TaskResult& result) {
  Json j{{"type", "eval_task"}, {"step", step}, {"primary", result.scores.empty() ? "" : result.scores[0].name}};
  j.update(json::parse(result.json(), "evaluation task " + result.name));
  append(j.dump());
  say("step " + std::to_string(step) + ": " + result.line());
}

void MetricsLogger::sample(int64_t step, const std::string& text) {
  // Sample text may hold a UTF-8 character cut by the token limit: replaced, never an exception.
  append(Json{{"type", "sample"}, {"step", step}, {"text", text}}.dump(-1, ' ', false, Json::error_handler_t::replace));
  say("step " + std::to_string(step) + " sample: " + text);
}

void MetricsLogger::keep_through(int64_t last) {
  if (!o_.write || !fs::exists(path())) return;
  std::istringstream in(fs::read_file(path()));
  std::string kept, line;
  while (std::getline(in, line)) {
    try {
      const Json record = json::parse(line, path());
      if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
          record["step"].get<int64_t>() <= last)
        kept += line + "\n";
    } catch (const llmtrain::Error&) {  // a line cut by a crash
    }
  }
  fs::write_file_atomic(path(), kept);
}

void MetricsLogger::write_loss_curves() const {
  if (!o_.write || !fs::exists(path())) return;
  fs::write_file_atomic(o_.out_dir + "/loss.svg", loss_curves_svg(fs::read_file(path()), o_.out_dir));
}

}  // namespace llmtrain::train
