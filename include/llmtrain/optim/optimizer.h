// The AMP-aware optimizer loop in one object: after backward, step() takes the global gradient norm
// (unscaled for fp16), folds the loss-scale inverse and the clipping factor into one factor, runs AdamW
// with GPT-2's parameter groups at the scheduled learning rate (a non-finite norm makes it a no-op, and
// fp16 backs its loss scale off), updates the loss scale and zeroes the gradients. On CUDA these are
// the multi-tensor kernels of ops/adamw.h, and the step's only host read is the norm, which travels
// to the host behind the update (queue_step/finish_step let the host queue the next step meanwhile).
// Precision modes: fp32; bf16 (autocast over fp32 parameters); fp16 (autocast with dynamic loss
// scaling); bf16-master (bf16 parameters, fp32 master weights and AdamW state in the optimizer).
#pragma once

#include <torch/nn/module.h>
#include <torch/optim/adamw.h>
#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "llmtrain/core/host_copy.h"
#include "llmtrain/optim/options.h"

namespace llmtrain::optim {

/// Dynamic loss scaling for fp16: the loss is multiplied by the scale before backward; a step whose
/// unscaled gradients hold inf or nan is skipped and the scale multiplied by backoff_factor; after
/// growth_interval good steps in a row it is multiplied by growth_factor.
///   GradScaler scaler;  scaler.scale(loss).backward();  bool bad = scaler.unscale_(grads);  scaler.update(bad);
class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = GradScalerOptions());
  torch::Tensor scale(const torch::Tensor& loss) const { return loss * scale_; }
  /// Divides every gradient by the scale; true when any value is inf or nan.
  bool unscale_(const std::vector<torch::Tensor>& grads) const;
  void update(bool found_inf);
  double scale_value() const { return scale_; }
  int64_t good_steps() const { return good_steps_; }
  void set_state(double scale, int64_t good_steps);

 private:
  GradScalerOptions o_;
  double scale_;
  int64_t good_steps_ = 0;
};

/// Splits parameters into GPT-2's AdamW groups: matrices and embeddings (dim >= 2) get weight decay,
/// biases and layer-norm gains do not.
void split_decay(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& decay,
                 std::vector<torch::Tensor>& no_decay);

/// The global L2 norm of all gradients (float32, on the gradients' device); missing gradients count 0.
torch::Tensor global_grad_norm(const std::vector<torch::Tensor>& params);

/// What one step did.
struct StepInfo {
  double lr = 0;
  double grad_norm = 0;  // before clipping, of the unscaled gradients
  bool skipped = false;  // inf/nan gradients: parameters untouched
  double loss_scale = 1;
};

/// Switches autocast on for one device type and dtype while it lives (nothing for fp32).
class AutocastScope {
 public:
  AutocastScope(torch::DeviceType device, Precision precision);
  ~AutocastScope();
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  torch::DeviceType device_;
  bool active_ = false, was_enabled_ = false;
  torch::ScalarType was_dtype_ = torch::kFloat;
};

/// ZeRO-1, as the Trainer wires it from dist::DataParallel's shard: the runs of the parameters' elements
/// this rank updates, each with its averaged gradient and the tensor its new values go to, a sum over
/// the ranks (for the global norm) and the gather that brings every rank's new values into the
/// parameters.
struct ParameterShard {
  struct Slice {
    size_t param;            // index into the model's trainable parameters
    int64_t offset, length;  // in the flattened parameter
    torch::Tensor grad;      // (length)
    torch::Tensor value;     // (length), the parameter's dtype, holding its current values
  };
  std::vector<Slice> slices;
  std::function<void(torch::Tensor&)> sum_over_ranks;  // in place, a float32 tensor on the parameters' device
  std::function<void()> gather;
};

/// AdamW with GPT-2's groups, a schedule, clipping and the precision mode's bookkeeping.
///   MixedPrecisionOptimizer opt(*model, options);
///   { AutocastScope amp(device, options.precision); loss = model(x, y).loss; }
///   opt.scale_loss(loss).backward();  StepInfo info = opt.step(step);
class MixedPrecisionOptimizer {
 public:
  /// For bf16-master the model's floating parameters are cast to bf16 here, and fp32 copies kept.
  MixedPrecisionOptimizer(torch::nn::Module& model, OptimizerOptions options);
  ~MixedPrecisionOptimizer();

  /// The loss to call backward() on: multiplied by the loss scale in fp16, unchanged otherwise.
  torch::Tensor scale_loss(const torch::Tensor& loss) const;
  /// Unscale and check, clip, AdamW at schedule.at(step), update the scale, zero the gradients. A
  /// parameter without a gradient counts as one with a zero gradient (its weight decay still applies).
  /// queue_step() then finish_step().
  StepInfo step(int64_t step);
  /// The step without waiting for the device: everything is queued and the gradients are zeroed, so
  /// the host can queue the next step's forward and backward while the device works. A step still
  /// queued is finished first. fp16 finishes at once (the next loss's scale depends on the outcome).
  void queue_step(int64_t step);
  /// Waits for the queued step's norm (its one host read: by then usually long done) and does the
  /// host's bookkeeping: the step count when the device did not skip the update, the loss scale. With
  /// no step queued, the last step's info again.
  StepInfo finish_step();
  bool step_queued() const { return queued_; }
  /// ZeRO-1 from here on: masters and AdamW state for the shard's slices alone (before the first step).
  void shard(ParameterShard shard);
  bool sharded() const { return sharded_; }
  void zero_grad();

  const OptimizerOptions& options() const { return o_; }
  torch::optim::AdamW& adamw();  // for checkpoints (finishes a queued step)
  GradScaler& scaler() { return scaler_; }
  /// The fp32 tensors AdamW updates: the model's parameters, or their master copies (bf16-master);
  /// sharded, one a slice (the slice's value itself when the parameters are fp32).
  const std::vector<torch::Tensor>& master_params() const { return masters_; }

 private:
  OptimizerOptions o_;
  std::vector<torch::Tensor> params_;   // the model's
  std::vector<torch::Tensor> masters_;  // what AdamW updates (== params_ unless bf16-master or sharded)
  std::vector<bool> decays_;            // masters_[i] takes weight decay
  std::unique_ptr<torch::optim::AdamW> adamw_;
  ParameterShard shard_;
  bool sharded_ = false;
  void make_adamw();  // over masters_, in GPT-2's groups
  GradScaler scaler_;
  bool queued_ = false;
  StepInfo last_;  // of the step queued or last finished
  HostCopy norm_;  // the queued step's norm on its way to the host
};

}  // namespace llmtrain::optim
