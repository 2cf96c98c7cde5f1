// Loss curves as a picture: the Trainer draws <out_dir>/loss.svg from its metrics.jsonl at the end of
// a run (and when a run stops early), so every run folder shows how training went without any plotting
// package. SVG, because it is plain text, any browser shows it, and it needs no image library.
#pragma once

#include <string>

namespace llmtrain::train {

/// An SVG picture of the loss curves in metrics.jsonl text: train loss at every step (and a smoothed
/// line through it) and val loss at every evaluation, on shared axes with ticks and a legend; below
/// them, when the run has evaluation tasks, a second panel with each task's first score ("primary");
/// `title` heads it. Lines that are not JSON records (cut by a crash) and non-finite losses are left out.
///   fs::write_file_atomic("runs/x/loss.svg", loss_curves_svg(fs::read_file("runs/x/metrics.jsonl"), "runs/x"));
std::string loss_curves_svg(const std::string& metrics_jsonl, const std::string& title);

}  // namespace llmtrain::train
