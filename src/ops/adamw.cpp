#include "llmtrain/ops/adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#if LLMTRAIN_WITH_CUDA
#include "cuda_ops.h"
#endif

namespace llmtrain::ops {
namespace {

void check_grads(const std::vector<at::Tensor>& grads) {
  LLMTRAIN_CHECK(!grads.empty(), "grad_norm_scale: no gradients");
  for (size_t i = 0; i < grads.size(); ++i) {
    LLMTRAIN_CHECK(grads[i].defined(), "grad_norm_scale: grads[", i, "] is undefined");
    LLMTRAIN_CHECK(grads[i].scalar_type() == grads[0].scalar_type() && grads[i].device() == grads[0].device(),
                   "grad_norm_scale: grads[", i, "] is ", grads[i].scalar_type(), " on ", grads[i].device(),
                   "; grads[0] is ", grads[0].scalar_type(), " on ", grads[0].device());
  }
}

}  // namespace

at::Tensor grad_norm_scale(const std::vector<at::Tensor>& grads, double inv_scale, double max_norm) {
  check_grads(grads);
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled("adamw") && grads[0].is_cuda()) return cuda::grad_norm_scale(grads, inv_scale, max_norm);
#endif
  std::vector<at::Tensor> norms;
  for (const auto& g : grads) norms.push_back(g.to(at::kFloat).norm());
  const at::Tensor norm = at::stack(norms).norm() * inv_scale;
  at::Tensor factor = at::full({}, inv_scale, norm.options());
  if (max_norm > 0) factor = at::where(norm > max_norm, factor * (max_norm / (norm + 1e-6)), factor);
  factor = at::where(norm.isfinite(), factor, at::full({}, NAN, norm.options()));
  return at::stack({norm, factor});
}

void adamw_step(const std::vector<at::Tensor>& masters, const std::vector<at::Tensor>& grads,
                const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                const std::vector<at::Tensor>& params, const std::vector<double>& weight_decays, const AdamWHyper& h,
                const at::Tensor& norm_scale) {
  const size_t n = masters.size();
  LLMTRAIN_CHECK(grads.size() == n && exp_avgs.size() == n && exp_avg_sqs.size() == n && weight_decays.size() == n &&
                     (params.empty() || params.size() == n),
                 "adamw_step: ", n, " masters, ", grads.size(), " grads, ", exp_avgs.size(), " exp_avgs, ",
                 exp_avg_sqs.size(), " exp_avg_sqs, ", params.size(), " params, ", weight_decays.size(),
                 " weight decays: expected equal counts (params may be empty)");
  LLMTRAIN_CHECK(h.step >= 1, "adamw_step: step must be >= 1, got ", h.step);
  LLMTRAIN_CHECK(norm_scale.numel() == 2, "adamw_step: norm_scale must be grad_norm_scale's (2) tensor, got ",
                 norm_scale.sizes());
  for (size_t i = 0; i < n; ++i) {
    const auto shape_of = [&](const at::Tensor& t, const char* name) {
      LLMTRAIN_CHECK(t.defined() && t.sizes() == masters[i].sizes() && t.device() == masters[i].device(),
                     "adamw_step: ", name, "[", i, "] must be ", masters[i].sizes(), " on ", masters[i].device(),
                     ", got ", t.defined() ? t.sizes() : at::IntArrayRef{}, t.defined() ? " on " : " (undefined)",
                     t.defined() ? t.device().str() : "");
    };
    LLMTRAIN_CHECK(masters[i].scalar_type() == at::kFloat, "adamw_step: masters[", i, "] must be float32, got ",
                   masters[i].scalar_type());
    for (const auto* s : {&exp_avgs[i], &exp_avg_sqs[i]})
      LLMTRAIN_CHECK(s->scalar_type() == at::kFloat, "adamw_step: optimizer state [", i, "] must be float32");
    shape_of(grads[i], "grads");
    shape_of(exp_avgs[i], "exp_avgs");
    shape_of(exp_avg_sqs[i], "exp_avg_sqs");
    if (!params.empty()) shape_of(params[i], "params");
  }
  if (n == 0) return;
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled("adamw") && masters[0].is_cuda())
    return cuda::adamw_step(masters, grads, exp_avgs, exp_avg_sqs, params, weight_decays, h, norm_scale);
#endif
  const at::Tensor factor = norm_scale[1];
  if (!std::isfinite(factor.item<double>())) return;
  const double bc1 = 1 - std::pow(h.beta1, double(h.step)), bc2 = 1 - std::pow(h.beta2, double(h.step));
  c10::AutoGradMode no_grad(false);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor g = grads[i].to(at::kFloat) * factor;
    masters[i].mul_(1 - h.lr * weight_decays[i]);
    exp_avgs[i].lerp_(g, 1 - h.beta1);
    exp_avg_sqs[i].mul_(h.beta2).addcmul_(g, g, 1 - h.beta2);
    const at::Tensor denom = (exp_avg_sqs[i].sqrt() / std::sqrt(bc2)).add_(h.eps);
    masters[i].addcdiv_(exp_avgs[i], denom, -h.lr / bc1);
    if (!params.empty()) params[i].copy_(masters[i]);
  }
}

}  // namespace llmtrain::ops
