#include "llmtrain/ops/nf4.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cmath>
#include <map>
#include <mutex>
#include <string>

#include "autocast.h"
#include "llmtrain/core/error.h"

namespace llmtrain::ops {
namespace {

// One of the static level tables on `device`: copied there once, not at every product (QLoRA
// dequantizes each layer in every forward and backward).
const at::Tensor& on_device(const at::Tensor& table, const at::Device& device) {
  if (device.is_cpu()) return table;
  static std::mutex mutex;
  static std::map<std::pair<const void*, std::string>, at::Tensor> copies;
  const std::lock_guard<std::mutex> lock(mutex);
  at::Tensor& copy = copies[{table.data_ptr(), device.str()}];
  if (!copy.defined()) copy = table.to(device);
  return copy;
}

// Block-wise absmax quantization to the nearest of `levels` (sorted; a value halfway between two
// takes the lower): each value scaled by its block's absolute maximum (a full block by the
// reciprocal, the last partial block by division, as bitsandbytes scales), clamped to [-1, 1]; an
// all-zero block stays zero. Returns the level indices and the absmaxes.
std::pair<at::Tensor, at::Tensor> quantize_blocks(const at::Tensor& flat, int64_t block, const at::Tensor& levels) {
  const int64_t n = flat.numel(), rem = n % block, full = n - rem;
  std::vector<at::Tensor> absmax, scaled;
  if (full > 0) {
    const at::Tensor b = flat.narrow(0, 0, full).view({full / block, block});
    const at::Tensor am = b.abs().amax(1);
    absmax.push_back(am);
    scaled.push_back(at::clamp(b * (1.0 / am.clamp_min(1e-38)).view({-1, 1}), -1, 1).view(-1));
  }
  if (rem > 0) {
    const at::Tensor tail = flat.narrow(0, full, rem);
    const at::Tensor am = tail.abs().amax();
    absmax.push_back(am.view(1));
    scaled.push_back(at::clamp(tail / am.clamp_min(1e-38), -1, 1));
  }
  const at::Tensor& l = on_device(levels, flat.device());
  const at::Tensor bounds = (l.narrow(0, 0, l.numel() - 1) + l.narrow(0, 1, l.numel() - 1)) / 2;
  return {at::bucketize(at::cat(scaled), bounds), at::cat(absmax)};
}

// The values of `codes` (indices into `levels`) times their block's scale, float32.
at::Tensor dequantize_blocks(const at::Tensor& codes, const at::Tensor& scales, int64_t block,
                             const at::Tensor& levels) {
  const int64_t n = codes.numel();
  const at::Tensor v = on_device(levels, codes.device()).index_select(0, codes.to(at::kLong).view(-1));
  const at::Tensor s = scales.repeat_interleave(block).narrow(0, 0, n);
  return v * s;
}

at::Tensor nf4_codes(const NF4Weight& q) {  // (numel) uint8, the level indices
  const at::Tensor hi = at::bitwise_right_shift(q.packed, 4), lo = at::bitwise_and(q.packed, 15);
  return at::stack({hi, lo}, 1).view(-1).narrow(0, 0, q.numel());
}

// x W^T + b with W dequantized in the forward and again in the backward.
struct NF4LinearFn : torch::autograd::Function<NF4LinearFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& bias,
                            const at::Tensor& packed, const at::Tensor& absmax_codes, const at::Tensor& absmax2,
                            double offset, std::vector<int64_t> shape) {
    const NF4Weight q{packed, absmax_codes, absmax2, offset, shape};
    ctx->save_for_backward({packed, absmax_codes, absmax2});
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["shape"] = shape;
    return at::linear(x, nf4_dequantize(q, x.scalar_type()), bias.numel() > 0 ? bias : at::Tensor());
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const NF4Weight q{saved[0], saved[1], saved[2], ctx->saved_data["offset"].toDouble(),
                      ctx->saved_data["shape"].toIntVector()};
    const at::Tensor& dy = grads[0];
    at::Tensor dx, db;
    if (ctx->needs_input_grad(0)) dx = at::matmul(dy, nf4_dequantize(q, dy.scalar_type()));
    if (ctx->needs_input_grad(1)) db = dy.reshape({-1, dy.size(-1)}).sum(0);  // not for the empty "no bias"
    return {dx, db, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

int64_t NF4Weight::numel() const {
  int64_t n = 1;
  for (const int64_t s : shape) n *= s;
  return n;
}

const at::Tensor& nf4_levels() {
  // The QLoRA paper's NF4 levels as bitsandbytes tabulates them.
  static const at::Tensor levels = at::tensor(
      {-1.0f, -0.6961928009986877f, -0.5250730514526367f, -0.39491748809814453f, -0.28444138169288635f,
       -0.18477343022823334f, -0.09105003625154495f, 0.0f, 0.07958029955625534f, 0.16093020141124725f,
       0.2461123019456863f, 0.33791524171829224f, 0.44070982933044434f, 0.5626170039176941f, 0.7229568362236023f, 1.0f},
      at::kFloat);
  return levels;
}

const at::Tensor& dynamic_map() {
  // Dettmers' dynamic tree map, signed, 8 bits: for exponents 10^-6 .. 10^0, the midpoints of 2^i + 1
  // points spread over [0.1, 1] (float32), each scaled by its power of ten, both signs; then 0 and 1.
  static const at::Tensor map = [] {
    std::vector<at::Tensor> parts;
    for (int i = 0; i < 7; ++i) {
      const at::Tensor b = at::linspace(0.1, 1, (int64_t(1) << i) + 1, at::kFloat);
      const at::Tensor means = (b.narrow(0, 0, b.size(0) - 1) + b.narrow(0, 1, b.size(0) - 1)) / 2.0;
      const double scale = std::pow(10.0, double(-6 + i));
      parts.push_back(means * scale);
      parts.push_back(means * -scale);
    }
    parts.push_back(at::tensor({0.0f, 1.0f}, at::kFloat));
    return std::get<0>(at::sort(at::cat(parts)));
  }();
  return map;
}

NF4Weight nf4_quantize(const at::Tensor& w) {
  LLMTRAIN_CHECK(w.defined() && w.numel() > 0 && at::isFloatingType(w.scalar_type()),
                 "nf4_quantize: expected a non-empty floating tensor, got ", w.defined() ? w.toString() : "none", " ",
                 w.defined() ? w.sizes() : at::IntArrayRef{});
  const at::Tensor flat = w.detach().reshape(-1).to(at::kFloat);
  LLMTRAIN_CHECK(at::isfinite(flat).all().item<bool>(), "nf4_quantize: the weight ", w.sizes(),
                 " holds a value that is not finite");
  auto [codes, absmax] = quantize_blocks(flat, kNF4Block, nf4_levels());
  if (codes.numel() % 2 != 0) codes = at::cat({codes, at::full({1}, 7, codes.options())});  // level 0.0
  const at::Tensor c = codes.to(at::kByte).view({-1, 2});
  NF4Weight q;
  q.packed = at::bitwise_or(at::bitwise_left_shift(c.select(1, 0), 4), c.select(1, 1)).contiguous();
  const at::Tensor mean = absmax.mean();
  q.offset = mean.item<double>();
  auto [acodes, absmax2] = quantize_blocks(absmax - mean, kNF4AbsmaxBlock, dynamic_map());
  q.absmax_codes = acodes.to(at::kByte);
  q.absmax2 = absmax2;
  q.shape = w.sizes().vec();
  return q;
}

at::Tensor nf4_dequantize(const NF4Weight& q, at::ScalarType dtype) {
  const at::Tensor absmax =
      dequantize_blocks(q.absmax_codes, q.absmax2, kNF4AbsmaxBlock, dynamic_map()) + float(q.offset);
  return dequantize_blocks(nf4_codes(q), absmax, kNF4Block, nf4_levels()).to(dtype).view(q.shape);
}

at::Tensor nf4_linear(const at::Tensor& x, const NF4Weight& q, const at::Tensor& bias) {
  LLMTRAIN_CHECK(q.shape.size() == 2 && x.dim() >= 1 && x.size(-1) == q.shape[1], "nf4_linear: x ", x.sizes(),
                 " does not fit the weight (", q.shape.size() == 2 ? q.shape[0] : -1, ", ",
                 q.shape.size() == 2 ? q.shape[1] : -1, ")");
  LLMTRAIN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == q.shape[0]), "nf4_linear: bias ", bias.sizes(),
                 " must be (", q.shape[0], ")");
  // No bias travels as an empty one: autograd's functions take no undefined inputs.
  const auto t = detail::autocast_like_linear({x, bias.defined() ? bias : at::empty({0}, x.options())});
  return NF4LinearFn::apply(t[0], t[1], q.packed, q.absmax_codes, q.absmax2, q.offset, q.shape);
}

}  // namespace llmtrain::ops
