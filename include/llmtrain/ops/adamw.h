// The optimizer's arithmetic as two ops: the global gradient norm folded with loss-scale inverse and
// clipping into one factor, and AdamW over many tensors (fp32 master weights, optional bf16 copies
// written back; moments in float32 or in 8 bits). On CUDA both are the multi-tensor kernels of
// kernels/adamw.cu and the factor stays on the device (a non-finite norm makes the update a no-op
// there); elsewhere the ATen reference.
//
// 8-bit moments are bitsandbytes' blockwise 8-bit AdamW state: blocks of kAdamW8bitBlock values, each
// scaled by its absolute maximum and stored as the nearest entry of the signed (first moment) or
// unsigned (second moment) dynamic map (ops/blockwise.h). Each step dequantizes them, updates them in
// float32 as bitsandbytes does (m = beta1 m + (1 - beta1) g, v = beta2 v + (1 - beta2) g^2, the weight
// moved by lr / bc1 * m / (sqrt(v) / sqrt(bc2) + eps)) and quantizes them again against new absmaxes.
// A moment is one uint8 tensor: its blocks' absmaxes (float32) padded to 16 bytes, then its codes.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace llmtrain::ops {

/// A (2) float32 tensor on the gradients' device: [0] the global L2 norm of grads * inv_scale, [1] the
/// factor AdamW applies to the gradients: inv_scale * min(1, max_norm / (norm + 1e-6)) (no clipping
/// when max_norm <= 0), NaN when the norm is not finite. All grads share one dtype and device.
///   auto norm_scale = llmtrain::ops::grad_norm_scale(grads, 1.0, 1.0);
at::Tensor grad_norm_scale(const std::vector<at::Tensor>& grads, double inv_scale, double max_norm);

/// grad_norm_scale's result from the norm of the (scaled) gradients, a float32 scalar: for gradients
/// spread over ranks, whose squared norms are summed first.
at::Tensor norm_scale_from_norm(const at::Tensor& norm, double inv_scale, double max_norm);

/// What one AdamW step uses besides the tensors.
struct AdamWHyper {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  int64_t step = 1;  // this step's number, from 1 (bias corrections)
  // The bf16 copies: rounded stochastically (unbiased: updates smaller than a bf16 step still move the
  // copy on average) from bits that depend on (round_seed, step, tensor index, element index) alone,
  // or to nearest.
  bool stochastic_rounding = false;
  uint64_t round_seed = 0;
};

constexpr int64_t kAdamW8bitBlock = 256;

/// A zero 8-bit moment for a tensor of `numel` elements (uint8, adamw8bit_bytes(numel), `options`' device
/// and pinning).
at::Tensor adamw8bit_state(int64_t numel, const at::TensorOptions& options);
int64_t adamw8bit_bytes(int64_t numel);
/// The values an 8-bit moment holds: (numel) float32, on its device. `second`: the unsigned map's.
at::Tensor adamw8bit_moment(const at::Tensor& state, int64_t numel, bool second);

/// The key adamw_step rounds tensor `index`'s bf16 copy with (kernels/common/rounding.h).
uint64_t round_key(const AdamWHyper& hyper, size_t index);

/// For each i, with g = grads[i] * norm_scale[1]: decoupled weight decay masters[i] *= 1 - lr *
/// weight_decays[i], then Adam's update of masters[i] with exp_avgs[i] and exp_avg_sqs[i] (updated in
/// place: float32 shaped like the master, or both 8-bit moments from adamw8bit_state), then params[i] =
/// masters[i] rounded to bfloat16 when `params` is not empty. Nothing changes when norm_scale[1] is not
/// finite. With CUDA masters the moments may live in pinned host memory instead (paged: the kernel
/// reads and writes them over the bus). Throws llmtrain::Error naming the tensor whose shape, dtype or
/// device does not fit.
///   llmtrain::ops::adamw_step(masters, grads, m, v, {}, wds, {.lr = 6e-4, .step = 1}, norm_scale);
void adamw_step(const std::vector<at::Tensor>& masters, const std::vector<at::Tensor>& grads,
                const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                const std::vector<at::Tensor>& params, const std::vector<double>& weight_decays,
                const AdamWHyper& hyper, const at::Tensor& norm_scale);

}  // namespace llmtrain::ops
