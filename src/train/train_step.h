// The Trainer's step: one optimizer step's micro-steps (forward and backward under autocast, replayed
// as a CUDA graph where it can be), their gradients averaged over the ranks, and the optimizer's update
// queued. It owns the graph; the model, optimizer and data-parallel wiring are the Trainer's.
#pragma once

#include <torch/types.h>

#include <memory>

#include "llmtrain/data/dataloader.h"
#include "llmtrain/dist/data_parallel.h"
#include "llmtrain/nn/causal_lm.h"
#include "llmtrain/optim/optimizer.h"
#include "llmtrain/train/graphed_step.h"

namespace llmtrain::train::detail {

class TrainStep {
 public:
  /// `accum` micro-steps an optimizer step; `dp` null on one process.
  TrainStep(nn::CausalLM& model, optim::MixedPrecisionOptimizer& opt, dist::DataParallel* dp, torch::Device device,
            int64_t accum);

  /// Replays each micro-step as a CUDA graph from now on (the caller knows it may: one CUDA device, no
  /// packed positions, not fp16).
  void use_graph();
  /// Drops the graph: parameters loaded anew may live in new storage, which it would not see.
  void drop_graph() { graph_.reset(); }
  /// The forward and backward of `accum` batches of `source`, gradients averaged over the ranks. Returns
  /// the sum of their losses (detached, on the device).
  torch::Tensor forward_backward(data::BatchSource& source);
  /// One micro-step's forward and backward (its gradients added to the parameters'); its loss, detached.
  torch::Tensor micro_step(const torch::Tensor& inputs, const torch::Tensor& targets, const torch::Tensor& positions);

 private:
  nn::CausalLM& model_;
  optim::MixedPrecisionOptimizer& opt_;
  dist::DataParallel* dp_;
  torch::Device device_;
  int64_t accum_;
  std::unique_ptr<GraphedStep> graph_;
};

}  // namespace llmtrain::train::detail
