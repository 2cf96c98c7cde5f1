#include "llmtrain/ops/nf4.h"

#include <ATen/ATen.h>

#include "autocast.h"
#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/blockwise.h"
#include "llmtrain/ops/dispatch.h"
#include "quantized_linear.h"
#include "tables.h"
#if LLMTRAIN_WITH_CUDA
#include "nf4_cuda.h"
#endif

namespace llmtrain::ops {
namespace {

at::Tensor nf4_codes(const NF4Weight& q) {  // (numel) uint8, the level indices
  const at::Tensor hi = at::bitwise_right_shift(q.packed, 4), lo = at::bitwise_and(q.packed, 15);
  return at::stack({hi, lo}, 1).view(-1).narrow(0, 0, q.numel());
}

// NF4 for detail::QuantizedLinearFn.
struct NF4Format {
  static NF4Weight weight(const at::Tensor& packed, const at::Tensor& absmax_codes, const at::Tensor& absmax2,
                          double offset, const std::vector<int64_t>& shape) {
    return {packed, absmax_codes, absmax2, offset, shape};
  }
  static at::Tensor dequantize(const NF4Weight& q, at::ScalarType dtype) { return nf4_dequantize(q, dtype); }
  static at::Tensor product([[maybe_unused]] const at::Tensor& x, [[maybe_unused]] const NF4Weight& q,
                            [[maybe_unused]] const at::Tensor& bias) {
#if LLMTRAIN_WITH_CUDA
    // A few rows (generation): the kernel reads the weight in its 4 bits.
    if (cuda_kernel_enabled(Kernel::kNF4) && x.is_cuda()) return cuda::nf4_gemv(x, q, bias);
#endif
    return {};
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

NF4Weight nf4_quantize(const at::Tensor& w) {
  LLMTRAIN_CHECK(w.defined() && w.numel() > 0 && at::isFloatingType(w.scalar_type()),
                 "nf4_quantize: expected a non-empty floating tensor, got ", w.defined() ? w.toString() : "none", " ",
                 w.defined() ? w.sizes() : at::IntArrayRef{});
  const at::Tensor flat = w.detach().reshape(-1).to(at::kFloat);
  LLMTRAIN_CHECK(at::isfinite(flat).all().item<bool>(), "nf4_quantize: the weight ", w.sizes(),
                 " holds a value that is not finite");
  auto [codes, absmax] = detail::quantize_blocks(flat, kNF4Block, detail::midpoints_on(nf4_levels(), flat.device()));
  if (codes.numel() % 2 != 0) codes = at::cat({codes, at::full({1}, 7, codes.options())});  // level 0.0
  const at::Tensor c = codes.view({-1, 2});
  NF4Weight q;
  q.packed = at::bitwise_or(at::bitwise_left_shift(c.select(1, 0), 4), c.select(1, 1)).contiguous();
  const at::Tensor mean = absmax.mean();
  q.offset = mean.item<double>();
  auto [acodes, absmax2] =
      detail::quantize_blocks(absmax - mean, kNF4AbsmaxBlock, detail::midpoints_on(dynamic_map(), flat.device()));
  q.absmax_codes = acodes;
  q.absmax2 = absmax2;
  q.shape = w.sizes().vec();
  return q;
}

at::Tensor nf4_dequantize(const NF4Weight& q, at::ScalarType dtype) {
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kNF4) && q.packed.is_cuda() &&
      (dtype == at::kFloat || dtype == at::kBFloat16 || dtype == at::kHalf))
    if (at::Tensor w = cuda::nf4_dequantize(q, dtype); w.defined()) return w;
#endif
  const at::Device device = q.packed.device();
  const at::Tensor absmax =
      detail::dequantize_blocks(q.absmax_codes, q.absmax2, kNF4AbsmaxBlock, detail::table_on(dynamic_map(), device)) +
      float(q.offset);
  return detail::dequantize_blocks(nf4_codes(q), absmax, kNF4Block, detail::table_on(nf4_levels(), device))
      .to(dtype)
      .view(q.shape);
}

at::Tensor nf4_linear(const at::Tensor& x, const NF4Weight& q, const at::Tensor& bias) {
  LLMTRAIN_CHECK(q.shape.size() == 2 && x.dim() >= 1 && x.size(-1) == q.shape[1], "nf4_linear: x ", x.sizes(),
                 " does not fit the weight (", q.shape.size() == 2 ? q.shape[0] : -1, ", ",
                 q.shape.size() == 2 ? q.shape[1] : -1, ")");
  LLMTRAIN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == q.shape[0]), "nf4_linear: bias ", bias.sizes(),
                 " must be (", q.shape[0], ")");
  const auto t = detail::autocast_like_linear({x, bias.defined() ? bias : at::empty({0}, x.options())});
  return detail::QuantizedLinearFn<NF4Format>::apply(t[0], t[1], q.packed, q.absmax_codes, q.absmax2, q.offset,
                                                     q.shape);
}

}  // namespace llmtrain::ops
