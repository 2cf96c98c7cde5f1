// A training micro-step, forward and backward, captured as CUDA graphs and replayed, so that the host
// queues a whole micro-step with one launch instead of a thousand: at GPT-2 124M's B=16 the host is
// otherwise close to the GPU's pace. Two graphs, captured on their second use (the first use runs
// eagerly and warms up cuBLAS, cuDNN and the allocator on the capture stream): the step's first
// micro-step, which writes the gradients, and the later ones, which add to them. The inputs are copied
// into tensors the graphs read; the gradients are the same tensors on every replay.
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <vector>

namespace llmtrain::train {

/// Replays `body` (forward and backward on a CUDA device; no host synchronisation inside) as a CUDA
/// graph. The parameters' .grad() are set to the graphs' gradients after each run.
///   GraphedStep g(model->parameters(), [&](const torch::Tensor& x, const torch::Tensor& y) {
///     auto loss = model->loss(x, y); loss.backward(); return loss.detach(); });
///   for (int64_t micro = 0; micro < accum; ++micro) loss = g.run(x, y, /*first=*/micro == 0);
class GraphedStep {
 public:
  /// Returns the micro-step's loss; what it computes must depend only on the parameters, the inputs
  /// and the CUDA generator (dropout), whose offsets the replays advance as the eager calls would.
  using Body = std::function<torch::Tensor(const torch::Tensor& inputs, const torch::Tensor& targets)>;
  GraphedStep(std::vector<torch::Tensor> params, Body body);
  ~GraphedStep();
  GraphedStep(const GraphedStep&) = delete;
  GraphedStep& operator=(const GraphedStep&) = delete;

  /// One micro-step on inputs and targets of the shapes of the first call. `first`: the step's first
  /// micro-step; every parameter's gradient must then be undefined (the optimizer's zero_grad), and
  /// the micro-step writes it; otherwise the micro-step adds to the gradients the previous one left.
  /// The loss returned is overwritten by the next replay of the same graph: use it before then.
  torch::Tensor run(const torch::Tensor& inputs, const torch::Tensor& targets, bool first);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmtrain::train
