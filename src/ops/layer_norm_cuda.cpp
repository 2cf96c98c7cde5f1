// Layer norm's and RMSNorm's glue: the CUDA kernels behind autograd functions for each alone and fused
// with the residual add before it, which keep the row means and reciprocal standard deviations (2N
// floats) and the normalised rows' input (x, or h = x + delta) for backward. RMSNorm is the layer norm
// kernels without a bias.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>

#include "kernels/layer_norm.cuh"
#include "layer_norm_cuda.h"
#include "llmtrain/core/cuda_check.h"
#include "llmtrain/core/error.h"

namespace llmtrain::ops::cuda {
namespace {

// Forward of the functions below (delta undefined: the norm alone; bias undefined: RMSNorm). Outputs:
// {y}, or {h, y}.
torch::autograd::variable_list norm_forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x_in,  // (..., C)
                                            const at::Tensor& delta_in,  // (..., C) or undefined
                                            const at::Tensor& weight_in, const at::Tensor& bias_in,  // (C)
                                            double eps) {
  const bool fused = delta_in.defined();
  const at::Tensor x = packed(x_in), delta = fused ? packed(delta_in) : at::Tensor();
  const bool rms = !bias_in.defined();
  const at::Tensor weight = packed(weight_in), bias = rms ? at::Tensor() : packed(bias_in);
  const int64_t C = x.size(-1), N = x.numel() / C;
  at::Tensor out = at::empty_like(x), h = fused ? at::empty_like(x) : at::Tensor();
  const auto f32 = x.options().dtype(at::kFloat);
  at::Tensor mean = at::empty({N}, f32), rstd = at::empty({N}, f32);
  LLMTRAIN_CUDA_CHECK(kernels::launch_layer_norm_fwd(
      x.data_ptr(), fused ? delta.data_ptr() : nullptr, weight.data_ptr(), rms ? nullptr : bias.data_ptr(),
      kernel_dtype(x, "layer_norm: x"), kernel_dtype(weight, "layer_norm: weight"), N, C, float(eps),
      fused ? h.data_ptr() : nullptr, out.data_ptr(), mean.data_ptr<float>(), rstd.data_ptr<float>(),
      at::cuda::getCurrentCUDAStream()));
  ctx->save_for_backward({fused ? h : x, weight, mean, rstd});
  ctx->saved_data["fused"] = fused;
  ctx->saved_data["rms"] = rms;
  return fused ? torch::autograd::variable_list{h, out} : torch::autograd::variable_list{out};
}

// Backward of them all: {dh, dh again (fused) or undefined, dweight, dbias (undefined for RMSNorm)}.
torch::autograd::variable_list norm_backward(torch::autograd::AutogradContext* ctx,
                                             const torch::autograd::variable_list& grads) {
  const bool fused = ctx->saved_data["fused"].toBool(), rms = ctx->saved_data["rms"].toBool();
  const auto saved = ctx->get_saved_variables();
  const at::Tensor &h = saved[0], &weight = saved[1], &mean = saved[2], &rstd = saved[3];
  const at::Tensor dh_in = fused && grads[0].defined() ? packed(grads[0].to(h.scalar_type())) : at::Tensor();
  const at::Tensor& dy = grads[fused ? 1 : 0];
  if (!dy.defined()) return {dh_in, dh_in, at::Tensor(), at::Tensor()};  // only h was used
  const at::Tensor dout = packed(dy.to(h.scalar_type()));
  const int64_t C = h.size(-1), N = h.numel() / C, blocks = kernels::layer_norm_bwd_blocks(N);
  at::Tensor dh = at::empty_like(h), dweight = at::empty_like(weight),
             dbias = rms ? at::Tensor() : at::empty_like(weight);
  const auto f32 = h.options().dtype(at::kFloat);
  at::Tensor pdw = at::empty({blocks, C}, f32), pdb = rms ? at::Tensor() : at::empty({blocks, C}, f32);  // (blocks, C)
  float* pdb_ptr = rms ? nullptr : pdb.data_ptr<float>();
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto dt = kernel_dtype(h, "layer_norm: x"), wdt = kernel_dtype(weight, "layer_norm: weight");
  LLMTRAIN_CUDA_CHECK(kernels::launch_layer_norm_bwd(dout.data_ptr(), h.data_ptr(),
                                                     dh_in.defined() ? dh_in.data_ptr() : nullptr, weight.data_ptr(),
                                                     mean.data_ptr<float>(), rstd.data_ptr<float>(), dt, wdt, N, C,
                                                     dh.data_ptr(), pdw.data_ptr<float>(), pdb_ptr, stream));
  LLMTRAIN_CUDA_CHECK(kernels::launch_layer_norm_bwd_finish(
      pdw.data_ptr<float>(), pdb_ptr, blocks, C, wdt, dweight.data_ptr(), rms ? nullptr : dbias.data_ptr(), stream));
  return {dh, fused ? dh : at::Tensor(), dweight, dbias};
}

// Four functions, because an autograd function's inputs must all be defined tensors.
struct LayerNormFn : torch::autograd::Function<LayerNormFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            const at::Tensor& bias, double eps) {
    return norm_forward(ctx, x, at::Tensor(), weight, bias, eps)[0];
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto g = norm_backward(ctx, grads);
    return {g[0], g[2], g[3], at::Tensor()};
  }
};

struct AddLayerNormFn : torch::autograd::Function<AddLayerNormFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& delta, const at::Tensor& weight,
                                                const at::Tensor& bias, double eps) {
    return norm_forward(ctx, x, delta, weight, bias, eps);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    auto g = norm_backward(ctx, grads);
    g.push_back(at::Tensor());  // eps
    return g;
  }
};

struct RmsNormFn : torch::autograd::Function<RmsNormFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& weight,
                            double eps) {
    return norm_forward(ctx, x, at::Tensor(), weight, at::Tensor(), eps)[0];
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto g = norm_backward(ctx, grads);
    return {g[0], g[2], at::Tensor()};
  }
};

struct AddRmsNormFn : torch::autograd::Function<AddRmsNormFn> {
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x,
                                                const at::Tensor& delta, const at::Tensor& weight, double eps) {
    return norm_forward(ctx, x, delta, weight, at::Tensor(), eps);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto g = norm_backward(ctx, grads);
    return {g[0], g[1], g[2], at::Tensor()};
  }
};

}  // namespace

bool rms_norm_supported(const at::Tensor& x, const at::Tensor& weight) {
  const auto t = x.scalar_type();
  return x.is_cuda() && weight.is_cuda() && (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) &&
         weight.scalar_type() == t && weight.is_contiguous() && x.numel() > 0 &&
         kernels::layer_norm_fits(kernel_dtype(x, "rms_norm: x"), x.size(-1));
}

std::pair<at::Tensor, at::Tensor> add_rms_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                               double eps) {
  if (!delta.defined()) return {x, RmsNormFn::apply(x, weight, eps)};
  const auto outs = AddRmsNormFn::apply(x, delta, weight, eps);
  return {outs[0], outs[1]};
}

bool layer_norm_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  const auto t = x.scalar_type(), w = weight.scalar_type();
  const bool types = (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) && (w == t || w == at::kFloat) &&
                     bias.scalar_type() == w;
  return x.is_cuda() && weight.is_cuda() && bias.is_cuda() && types && weight.is_contiguous() && bias.is_contiguous() &&
         x.numel() > 0 && kernels::layer_norm_fits(kernel_dtype(x, "layer_norm: x"), x.size(-1));
}

std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                                 const at::Tensor& bias, double eps) {
  if (!delta.defined()) return {x, LayerNormFn::apply(x, weight, bias, eps)};
  const auto outs = AddLayerNormFn::apply(x, delta, weight, bias, eps);
  return {outs[0], outs[1]};
}

}  // namespace llmtrain::ops::cuda
