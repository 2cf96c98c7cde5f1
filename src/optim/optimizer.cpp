#include "llmtrain/optim/optimizer.h"

#include <ATen/autocast_mode.h>
#include <torch/utils.h>

#include <cmath>

#include "llmtrain/core/error.h"
#include "llmtrain/ops/adamw.h"

namespace llmtrain::optim {

// ---- GradScaler ---------------------------------------------------------------------------------

GradScaler::GradScaler(GradScalerOptions options) : o_(options), scale_(options.init_scale) {
  LLMTRAIN_CHECK(o_.init_scale > 0, "GradScaler: init_scale must be positive, got ", o_.init_scale);
  LLMTRAIN_CHECK(o_.growth_factor > 1, "GradScaler: growth_factor must exceed 1, got ", o_.growth_factor);
  LLMTRAIN_CHECK(o_.backoff_factor > 0 && o_.backoff_factor < 1, "GradScaler: backoff_factor must be in (0, 1), got ",
                 o_.backoff_factor);
  LLMTRAIN_CHECK(o_.growth_interval > 0, "GradScaler: growth_interval must be positive, got ", o_.growth_interval);
}

bool GradScaler::unscale_(const std::vector<torch::Tensor>& grads) const {
  torch::NoGradGuard no_grad;
  torch::Tensor found;
  for (const auto& g : grads) {
    if (!g.defined()) continue;
    g.mul_(1.0 / scale_);
    const auto bad = g.isfinite().logical_not().any();
    found = found.defined() ? found.logical_or(bad) : bad;
  }
  return found.defined() && found.item<bool>();  // one host sync for all gradients
}

void GradScaler::update(bool found_inf) {
  if (found_inf) {
    scale_ *= o_.backoff_factor;
    good_steps_ = 0;
  } else if (++good_steps_ == o_.growth_interval) {
    scale_ *= o_.growth_factor;
    good_steps_ = 0;
  }
}

void GradScaler::set_state(double scale, int64_t good_steps) {
  LLMTRAIN_CHECK(scale > 0 && std::isfinite(scale), "GradScaler: loss scale ", scale, " is not a positive number");
  scale_ = scale;
  good_steps_ = good_steps;
}

// ---- groups, norm, autocast ---------------------------------------------------------------------

namespace {
// GPT-2's parameter groups: matrices and embeddings decay; biases and layer-norm gains do not.
bool takes_decay(const torch::Tensor& p) { return p.dim() >= 2; }
}  // namespace

void split_decay(const std::vector<torch::Tensor>& params, std::vector<torch::Tensor>& decay,
                 std::vector<torch::Tensor>& no_decay) {
  for (const auto& p : params) (takes_decay(p) ? decay : no_decay).push_back(p);
}

torch::Tensor global_grad_norm(const std::vector<torch::Tensor>& params) {
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad().contiguous());
  if (grads.empty()) return torch::zeros({}, torch::kFloat);
  return ops::grad_norm_scale(grads, 1.0, 0.0)[0];
}

AutocastScope::AutocastScope(torch::DeviceType device, Precision precision) : device_(device) {
  if (precision != Precision::kBF16 && precision != Precision::kFP16) return;  // fp32, and bf16 parameters
  active_ = true;
  was_enabled_ = at::autocast::is_autocast_enabled(device_);
  was_dtype_ = at::autocast::get_autocast_dtype(device_);
  at::autocast::set_autocast_enabled(device_, true);
  at::autocast::set_autocast_dtype(device_, precision == Precision::kBF16 ? torch::kBFloat16 : torch::kHalf);
  at::autocast::increment_nesting();
}

AutocastScope::~AutocastScope() {
  if (!active_) return;
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  at::autocast::set_autocast_enabled(device_, was_enabled_);
  at::autocast::set_autocast_dtype(device_, was_dtype_);
}

// ---- MixedPrecisionOptimizer --------------------------------------------------------------------

MixedPrecisionOptimizer::MixedPrecisionOptimizer(torch::nn::Module& model, OptimizerOptions options)
    : o_(std::move(options)), scaler_(o_.scaler) {
  o_.schedule.validate();
  LLMTRAIN_CHECK(o_.beta1 >= 0 && o_.beta1 < 1 && o_.beta2 >= 0 && o_.beta2 < 1, "optimizer: betas (", o_.beta1, ", ",
                 o_.beta2, ") must lie in [0, 1)");
  LLMTRAIN_CHECK(o_.eps > 0, "optimizer: eps must be positive, got ", o_.eps);
  LLMTRAIN_CHECK(o_.weight_decay >= 0, "optimizer: weight_decay must be >= 0, got ", o_.weight_decay);
  LLMTRAIN_CHECK(o_.min_8bit_size >= 1, "optimizer: min_8bit_size must be positive, got ", o_.min_8bit_size);
  if (o_.precision == Precision::kBF16Master) model.to(torch::kBFloat16);
  for (const auto& p : model.parameters())
    if (p.requires_grad()) params_.push_back(p);
  LLMTRAIN_CHECK(!params_.empty(), "optimizer: the model has no trainable parameters");
  for (const auto& p : params_) {
    masters_.push_back(o_.precision == Precision::kBF16Master ? p.detach().to(torch::kFloat).clone() : p);
    decays_.push_back(takes_decay(p));
  }
  make_adamw();
}

void MixedPrecisionOptimizer::make_adamw() {
  std::vector<torch::Tensor> decay, no_decay;
  for (size_t i = 0; i < masters_.size(); ++i) (decays_[i] ? decay : no_decay).push_back(masters_[i]);
  const auto group_options = [&](double wd) {
    return std::make_unique<torch::optim::AdamWOptions>(
        torch::optim::AdamWOptions(o_.schedule.at(0)).betas({o_.beta1, o_.beta2}).eps(o_.eps).weight_decay(wd));
  };
  std::vector<torch::optim::OptimizerParamGroup> groups;
  if (!decay.empty()) groups.emplace_back(decay, group_options(o_.weight_decay));
  if (!no_decay.empty()) groups.emplace_back(no_decay, group_options(0.0));
  adamw_ = std::make_unique<torch::optim::AdamW>(groups, *group_options(o_.weight_decay));
}

void MixedPrecisionOptimizer::shard(ParameterShard shard) {
  LLMTRAIN_CHECK(!queued_ && adamw_->state().empty(), "optimizer: shard() must come before the first step");
  LLMTRAIN_CHECK(shard.sum_over_ranks && shard.gather, "optimizer: a shard needs sum_over_ranks and gather");
  torch::NoGradGuard no_grad;
  masters_.clear();
  decays_.clear();
  for (const auto& s : shard.slices) {
    LLMTRAIN_CHECK(s.param < params_.size() && s.offset >= 0 && s.length > 0 &&
                       s.offset + s.length <= params_[s.param].numel() && s.grad.numel() == s.length &&
                       s.value.numel() == s.length && s.value.scalar_type() == params_[s.param].scalar_type(),
                   "optimizer: shard slice of parameter ", s.param, " (offset ", s.offset, ", length ", s.length,
                   ") does not fit the model's parameters");
    // fp32 parameters are updated in the slice's value itself; bf16 ones through an fp32 master.
    masters_.push_back(s.value.scalar_type() == torch::kFloat ? s.value : s.value.to(torch::kFloat));
    decays_.push_back(takes_decay(params_[s.param]));
  }
  shard_ = std::move(shard);
  sharded_ = true;
  make_adamw();
}

MixedPrecisionOptimizer::~MixedPrecisionOptimizer() = default;

torch::Tensor MixedPrecisionOptimizer::scale_loss(const torch::Tensor& loss) const {
  return o_.precision == Precision::kFP16 ? scaler_.scale(loss) : loss;
}

torch::optim::AdamW& MixedPrecisionOptimizer::adamw() {
  finish_step();  // a queued step's count is part of the state
  return *adamw_;
}

void MixedPrecisionOptimizer::zero_grad() {
  for (auto& p : params_) p.mutable_grad() = torch::Tensor();
  if (o_.precision == Precision::kBF16Master)
    for (auto& m : masters_) m.mutable_grad() = torch::Tensor();
}

StepInfo MixedPrecisionOptimizer::step(int64_t step) {
  queue_step(step);
  return finish_step();
}

void MixedPrecisionOptimizer::queue_step(int64_t step) {
  if (queued_) finish_step();  // its outcome decides this step's count
  torch::NoGradGuard no_grad;
  StepInfo info;
  info.lr = o_.schedule.at(step);
  // The gradients as backward left them (bf16 for bf16-master: the kernels read them as they are).
  std::vector<torch::Tensor> grads, exp_avgs, exp_avg_sqs;
  std::vector<double> decays;
  if (sharded_)
    for (const auto& s : shard_.slices) grads.push_back(s.grad);
  else
    for (size_t i = 0; i < params_.size(); ++i)
      grads.push_back(params_[i].grad().defined() ? params_[i].grad().contiguous() : torch::zeros_like(params_[i]));
  // Adam's moments live in torch::optim::AdamW's state (so checkpoints keep its format); made on first use.
  int64_t done = 0;  // steps taken: the same for every tensor
  for (size_t i = 0; i < masters_.size(); ++i) {
    const auto& m = masters_[i];
    auto& slot = adamw_->state()[m.unsafeGetTensorImpl()];
    const bool eight = o_.state == StateFormat::k8Bit && m.numel() >= o_.min_8bit_size;
    // Where the moments live: beside the master, or pinned on the host (paged, CUDA masters).
    const bool paged = o_.paged && m.is_cuda();
    const auto place = [&](const torch::Tensor& t) {
      if (paged) return t.is_cpu() && t.is_pinned() ? t : t.to(torch::kCPU).pin_memory();
      return t.device() == m.device() ? t : t.to(m.device()).contiguous();  // e.g. loaded from a checkpoint
    };
    if (!slot) {
      const auto where = m.options().dtype(torch::kFloat).device(paged ? torch::kCPU : m.device()).pinned_memory(paged);
      const auto fresh_moment = [&] {
        return eight ? ops::adamw8bit_state(m.numel(), where) : torch::zeros(m.sizes(), where);
      };
      auto fresh = std::make_unique<torch::optim::AdamWParamState>();
      fresh->exp_avg(fresh_moment());
      fresh->exp_avg_sq(fresh_moment());
      fresh->step(0);
      slot = std::move(fresh);
    }
    auto& st = static_cast<torch::optim::AdamWParamState&>(*slot);
    LLMTRAIN_CHECK(st.exp_avg().scalar_type() == (eight ? torch::kByte : torch::kFloat), "optimizer: tensor ", i, " (",
                   m.sizes(), ") has ", st.exp_avg().scalar_type() == torch::kByte ? "8-bit" : "float32",
                   " moments (a loaded state?); this optimizer keeps them in ", eight ? "8 bits" : "float32");
    st.exp_avg(place(st.exp_avg()));
    st.exp_avg_sq(place(st.exp_avg_sq()));
    done = st.step();
    exp_avgs.push_back(st.exp_avg());
    exp_avg_sqs.push_back(st.exp_avg_sq());
    decays.push_back(decays_[i] ? o_.weight_decay : 0.0);
  }
  const double inv_scale = o_.precision == Precision::kFP16 ? 1.0 / scaler_.scale_value() : 1.0;
  torch::Tensor norm_scale;
  if (sharded_) {  // the global norm from every rank's squared norm of its slices
    const auto f32 = params_[0].options().dtype(torch::kFloat);
    torch::Tensor sq = grads.empty() ? torch::zeros({}, f32) : ops::grad_norm_scale(grads, 1.0, 0.0)[0].square();
    shard_.sum_over_ranks(sq);
    norm_scale = ops::norm_scale_from_norm(sq.sqrt(), inv_scale, o_.grad_clip);
  } else {
    norm_scale = ops::grad_norm_scale(grads, inv_scale, o_.grad_clip);
  }
  ops::AdamWHyper h;
  h.lr = info.lr;
  h.beta1 = o_.beta1;
  h.beta2 = o_.beta2;
  h.eps = o_.eps;
  h.step = done + 1;
  h.stochastic_rounding = o_.stochastic_rounding;
  h.round_seed = o_.seed;
  std::vector<torch::Tensor> copies;  // the bf16 tensors written from the masters
  if (o_.precision == Precision::kBF16Master) {
    if (!sharded_) copies = params_;
    else
      for (const auto& s : shard_.slices) copies.push_back(s.value);
  }
  ops::adamw_step(masters_, grads, exp_avgs, exp_avg_sqs, copies, decays, h, norm_scale);
  if (sharded_) shard_.gather();  // skipped on the device, the values sent are the unchanged ones
  // The norm travels to the host behind the update: whether the device skipped it (an inf/nan gradient)
  // is known when finish_step() reads it.
  last_ = info;
  norm_ = HostCopy(norm_scale.narrow(0, 0, 1));
  queued_ = true;
  zero_grad();
  if (o_.precision == Precision::kFP16) finish_step();  // the next loss's scale depends on the outcome
}

StepInfo MixedPrecisionOptimizer::finish_step() {
  if (!queued_) return last_;
  queued_ = false;
  last_.grad_norm = norm_.get()[0].item<double>();
  last_.skipped = !std::isfinite(last_.grad_norm);
  if (!last_.skipped)
    for (auto& [key, st] : adamw_->state()) {
      auto& s = static_cast<torch::optim::AdamWParamState&>(*st);
      s.step(s.step() + 1);
    }
  if (o_.precision == Precision::kFP16) scaler_.update(last_.skipped);
  last_.loss_scale = o_.precision == Precision::kFP16 ? scaler_.scale_value() : 1.0;
  return last_;
}

}  // namespace llmtrain::optim
