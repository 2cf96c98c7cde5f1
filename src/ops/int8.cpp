#include "llmtrain/ops/int8.h"

#include <ATen/ATen.h>

#include "autocast.h"
#include "llmtrain/core/error.h"
#include "quantized_linear.h"

namespace llmtrain::ops {
namespace {

// int8 rows for detail::QuantizedLinearFn (no third tensor, no offset).
struct Int8Format {
  static Int8Weight weight(const at::Tensor& codes, const at::Tensor& absmax, const at::Tensor&, double,
                           const std::vector<int64_t>&) {
    return {codes, absmax};
  }
  static at::Tensor dequantize(const Int8Weight& q, at::ScalarType dtype) { return int8_dequantize(q, dtype); }
  static at::Tensor product(const at::Tensor&, const Int8Weight&, const at::Tensor&) { return {}; }
};

}  // namespace

Int8Weight int8_quantize(const at::Tensor& w) {
  LLMTRAIN_CHECK(w.defined() && w.dim() == 2 && w.numel() > 0 && at::isFloatingType(w.scalar_type()),
                 "int8_quantize: expected a non-empty floating (out, in) matrix, got ",
                 w.defined() ? w.toString() : "none", " ", w.defined() ? w.sizes() : at::IntArrayRef{});
  const at::Tensor f = w.detach().to(at::kFloat);
  LLMTRAIN_CHECK(at::isfinite(f).all().item<bool>(), "int8_quantize: the weight ", w.sizes(),
                 " holds a value that is not finite");
  Int8Weight q;
  q.absmax = f.abs().amax(1);
  // 127 / absmax per row; an all-zero row's factor is 0 (bitsandbytes' would be inf, and 0 * inf NaN).
  const at::Tensor factor = at::where(q.absmax > 0, 127.0 / q.absmax, at::zeros_like(q.absmax));
  q.codes = at::round(f * factor.unsqueeze(1)).to(at::kChar);
  return q;
}

at::Tensor int8_dequantize(const Int8Weight& q, at::ScalarType dtype) {
  return (q.codes * q.absmax.view({-1, 1}) * 7.874015718698502e-3).to(dtype);  // bitsandbytes' 1 / 127
}

at::Tensor int8_linear(const at::Tensor& x, const Int8Weight& q, const at::Tensor& bias) {
  LLMTRAIN_CHECK(q.codes.dim() == 2 && x.dim() >= 1 && x.size(-1) == q.codes.size(1), "int8_linear: x ", x.sizes(),
                 " does not fit the weight ", q.codes.sizes());
  LLMTRAIN_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == q.codes.size(0)), "int8_linear: bias ",
                 bias.sizes(), " must be (", q.codes.size(0), ")");
  const auto t = detail::autocast_like_linear({x, bias.defined() ? bias : at::empty({0}, x.options())});
  return detail::QuantizedLinearFn<Int8Format>::apply(t[0], t[1], q.codes, q.absmax, at::empty({0}, q.absmax.options()),
                                                      0.0, q.codes.sizes().vec());
}

}  // namespace llmtrain::ops
