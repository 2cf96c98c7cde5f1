#include "train_step.h"

namespace llmtrain::train::detail {

TrainStep::TrainStep(nn::CausalLM& model, optim::MixedPrecisionOptimizer& opt, dist::DataParallel* dp,
                     torch::Device device, int64_t accum)
    : model_(model), opt_(opt), dp_(dp), device_(device), accum_(accum) {}

void TrainStep::use_graph() {
  if (graph_) return;
  graph_ = std::make_unique<GraphedStep>(
      model_.module().parameters(),
      [this](const torch::Tensor& x, const torch::Tensor& y) { return micro_step(x, y, {}); });
}

torch::Tensor TrainStep::micro_step(const torch::Tensor& inputs, const torch::Tensor& targets,
                                    const torch::Tensor& positions) {
  torch::Tensor loss;
  {
    optim::AutocastScope amp(device_.type(), opt_.options().precision);
    loss = model_.loss(inputs, targets, positions);
  }
  opt_.scale_loss(loss / double(accum_)).backward();
  return loss.detach();
}

torch::Tensor TrainStep::forward_backward(data::BatchSource& source) {
  torch::Tensor loss_sum;
  if (dp_) dp_->zero_grad();
  for (int64_t micro = 0; micro < accum_; ++micro) {
    if (dp_) dp_->set_sync(micro == accum_ - 1);  // the step's last backward averages over the ranks
    const auto batch = source.next();
    const torch::Tensor loss = graph_ ? graph_->run(batch.inputs, batch.targets, /*first=*/micro == 0)
                                      : micro_step(batch.inputs, batch.targets, batch.positions);
    loss_sum = loss_sum.defined() ? loss_sum + loss : loss.clone();  // a graph's loss: overwritten by its next replay
  }
  if (dp_) dp_->finish();  // the gradients' mean over the ranks, before unscaling and clipping
  return loss_sum;
}

}  // namespace llmtrain::train::detail
