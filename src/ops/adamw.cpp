#include "llmtrain/ops/adamw.h"

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>

#include <cmath>

#include "kernels/common/rounding.h"
#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/blockwise.h"
#include "llmtrain/ops/dispatch.h"
#include "tables.h"
#if LLMTRAIN_WITH_CUDA
#include "adamw_cuda.h"
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

// The bfloat16 copy of `master`, rounded as the CUDA kernel rounds it (kernels::bf16_bits_stochastic,
// the same bits) in ATen ops on master's device: int64 arithmetic wraps as uint64's does, and a masked
// arithmetic shift is the logical one.
at::Tensor stochastic_bf16(const at::Tensor& master, uint64_t key) {
  const auto shr = [](const at::Tensor& z, int s) {
    return z.bitwise_right_shift(s).bitwise_and(int64_t(~uint64_t(0) >> s));
  };
  const auto mix = [&](at::Tensor z) {  // kernels::mix64
    z = z.bitwise_xor(shr(z, 30)).mul_(int64_t(0xbf58476d1ce4e5b9ull));
    z = z.bitwise_xor(shr(z, 27)).mul_(int64_t(0x94d049bb133111ebull));
    return z.bitwise_xor(shr(z, 31));
  };
  const at::Tensor w = master.contiguous();
  const auto i64 = w.options().dtype(at::kLong);
  const at::Tensor index = at::arange(1, w.numel() + 1, i64).view(w.sizes());
  const at::Tensor r = shr(mix(index.mul(int64_t(0x9e3779b97f4a7c15ull)).add_(int64_t(key))), 48);
  const at::Tensor u = w.view(at::kInt).to(at::kLong).bitwise_and_(int64_t(0xffffffff));  // the float's bits
  at::Tensor bits = shr(u.add_(r), 16);                                                   // 0 .. 65535
  bits = bits.sub_(bits.ge(32768).to(at::kLong).mul_(65536)).to(at::kShort);              // as int16
  return at::where(w.isfinite(), bits.view(at::kBFloat16), w.to(at::kBFloat16));          // inf, NaN: to nearest
}

int64_t blocks_8bit(int64_t numel) { return (numel + kAdamW8bitBlock - 1) / kAdamW8bitBlock; }
int64_t header_8bit(int64_t numel) { return (4 * blocks_8bit(numel) + 15) / 16 * 16; }
at::Tensor absmax_of(const at::Tensor& state, int64_t numel) {
  return state.narrow(0, 0, 4 * blocks_8bit(numel)).view(at::kFloat);
}
at::Tensor codes_of(const at::Tensor& state, int64_t numel) { return state.narrow(0, header_8bit(numel), numel); }

// Quantizes `moment` (float32, flat, on the state's device or not) into the 8-bit `state`.
void store_8bit(const at::Tensor& state, const at::Tensor& moment, bool second) {
  const int64_t n = moment.numel();
  auto [codes, absmax] = detail::quantize_blocks(moment.reshape(-1), kAdamW8bitBlock,
                                                 detail::midpoints_on(dynamic_map(!second), moment.device()));
  codes_of(state, n).copy_(codes);
  absmax_of(state, n).copy_(absmax);
}

}  // namespace

int64_t adamw8bit_bytes(int64_t numel) { return header_8bit(numel) + numel; }

at::Tensor adamw8bit_state(int64_t numel, const at::TensorOptions& options) {
  LLMTRAIN_CHECK(numel > 0, "adamw8bit_state: numel must be positive, got ", numel);
  return at::zeros({adamw8bit_bytes(numel)}, options.dtype(at::kByte));
}

at::Tensor adamw8bit_moment(const at::Tensor& state, int64_t numel, bool second) {
  LLMTRAIN_CHECK(state.scalar_type() == at::kByte && state.dim() == 1 && state.is_contiguous() &&
                     state.numel() == adamw8bit_bytes(numel),
                 "adamw8bit_moment: expected a contiguous uint8 state of ", adamw8bit_bytes(numel), " bytes for ",
                 numel, " elements, got ", state.scalar_type(), " ", state.sizes());
  return detail::dequantize_blocks(codes_of(state, numel), absmax_of(state, numel), kAdamW8bitBlock,
                                   detail::table_on(dynamic_map(!second), state.device()));
}

uint64_t round_key(const AdamWHyper& h, size_t index) {
  return kernels::mix64(kernels::mix64(h.round_seed ^ kernels::mix64(uint64_t(h.step))) + uint64_t(index));
}

at::Tensor grad_norm_scale(const std::vector<at::Tensor>& grads, double inv_scale, double max_norm) {
  check_grads(grads);
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kAdamW) && grads[0].is_cuda())
    return cuda::grad_norm_scale(grads, inv_scale, max_norm);
#endif
  std::vector<at::Tensor> norms;
  for (const auto& g : grads) norms.push_back(g.to(at::kFloat).norm());
  return norm_scale_from_norm(at::stack(norms).norm(), inv_scale, max_norm);
}

at::Tensor norm_scale_from_norm(const at::Tensor& raw_norm, double inv_scale, double max_norm) {
  const at::Tensor norm = raw_norm.to(at::kFloat).reshape({}) * inv_scale;
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
    const at::Tensor& w = masters[i];
    const auto shape_of = [&](const at::Tensor& t, const char* name) {
      LLMTRAIN_CHECK(t.defined() && t.sizes() == w.sizes() && t.device() == w.device(), "adamw_step: ", name, "[", i,
                     "] must be ", w.sizes(), " on ", w.device(), ", got ", t.defined() ? t.sizes() : at::IntArrayRef{},
                     t.defined() ? " on " : " (undefined)", t.defined() ? t.device().str() : "");
    };
    LLMTRAIN_CHECK(w.scalar_type() == at::kFloat, "adamw_step: masters[", i, "] must be float32, got ",
                   w.scalar_type());
    const bool eight = exp_avgs[i].defined() && exp_avgs[i].scalar_type() == at::kByte;
    for (const auto& [s, name] : {std::pair{&exp_avgs[i], "exp_avgs"}, std::pair{&exp_avg_sqs[i], "exp_avg_sqs"}}) {
      LLMTRAIN_CHECK(s->defined() && s->is_contiguous(), "adamw_step: ", name, "[", i, "] must be a contiguous tensor");
      // The state on the master's device, or in pinned host memory beside a CUDA master (paged).
      LLMTRAIN_CHECK(s->device() == w.device() || (w.is_cuda() && s->is_cpu() && s->is_pinned()), "adamw_step: ", name,
                     "[", i, "] is on ", s->device(), s->is_cpu() ? " (not pinned)" : "", "; its master is on ",
                     w.device());
      if (eight)
        LLMTRAIN_CHECK(s->scalar_type() == at::kByte && s->dim() == 1 && s->numel() == adamw8bit_bytes(w.numel()),
                       "adamw_step: ", name, "[", i, "] must be an 8-bit moment of ", adamw8bit_bytes(w.numel()),
                       " bytes for ", w.numel(), " elements (exp_avgs[", i, "] is uint8), got ", s->scalar_type(), " ",
                       s->sizes());
      else
        LLMTRAIN_CHECK(s->scalar_type() == at::kFloat && s->sizes() == w.sizes(), "adamw_step: ", name, "[", i,
                       "] must be float32 ", w.sizes(), " (or both moments 8-bit: ", adamw8bit_bytes(w.numel()),
                       " bytes), got ", s->scalar_type(), " ", s->sizes());
    }
    shape_of(grads[i], "grads");
    if (!params.empty()) {
      shape_of(params[i], "params");
      LLMTRAIN_CHECK(params[i].scalar_type() == at::kBFloat16, "adamw_step: params[", i, "] must be bfloat16, got ",
                     params[i].scalar_type());
    }
  }
  if (n == 0) return;
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kAdamW) && masters[0].is_cuda())
    return cuda::adamw_step(masters, grads, exp_avgs, exp_avg_sqs, params, weight_decays, h, norm_scale);
#endif
  const at::Tensor factor = norm_scale[1];
  if (!std::isfinite(factor.item<double>())) return;
  const double bc1 = 1 - std::pow(h.beta1, double(h.step)), bc2 = 1 - std::pow(h.beta2, double(h.step));
  c10::AutoGradMode no_grad(false);
  for (size_t i = 0; i < n; ++i) {
    const at::Tensor& w = masters[i];
    const at::Tensor g = grads[i].to(at::kFloat) * factor;
    const bool eight = exp_avgs[i].scalar_type() == at::kByte;
    // The moments on the master's device (a paged state is copied there and back).
    const auto moment = [&](const at::Tensor& s, bool second) {
      return eight ? adamw8bit_moment(s, w.numel(), second).to(w.device()).view(w.sizes()) : s.to(w.device());
    };
    at::Tensor m = moment(exp_avgs[i], false), v = moment(exp_avg_sqs[i], true);
    w.mul_(1 - h.lr * weight_decays[i]);
    if (eight) {  // bitsandbytes' arithmetic, which the 8-bit kernel follows
      m.mul_(h.beta1).add_(g, 1 - h.beta1);
    } else {
      m.lerp_(g, 1 - h.beta1);
    }
    v.mul_(h.beta2).addcmul_(g, g, 1 - h.beta2);
    const at::Tensor denom = (v.sqrt() / std::sqrt(bc2)).add_(h.eps);
    w.addcdiv_(m, denom, -h.lr / bc1);
    if (eight) {
      store_8bit(exp_avgs[i], m, false);
      store_8bit(exp_avg_sqs[i], v, true);
    } else if (!exp_avgs[i].is_same(m)) {
      exp_avgs[i].copy_(m);
      exp_avg_sqs[i].copy_(v);
    }
    if (!params.empty()) params[i].copy_(h.stochastic_rounding ? stochastic_bf16(w, round_key(h, i)) : w);
  }
}

}  // namespace llmtrain::ops
