// The product of a frozen quantized weight (ops/nf4.h, ops/int8.h) as one autograd function: W
// dequantized for the product and again for the input's gradient, never kept (the memory a quantized
// base saves). A format rebuilds its weight from up to three saved tensors, an offset and a shape,
// dequantizes it, and may take a product itself (NF4's few-row kernel): an undefined result leaves it to
// the dequantized weight's product.
#pragma once

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <cstdint>
#include <vector>

namespace llmtrain::ops::detail {

template <typename Format>
struct QuantizedLinearFn : torch::autograd::Function<QuantizedLinearFn<Format>> {
  // No bias travels as an empty tensor: autograd's functions take no undefined inputs.
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& x, const at::Tensor& bias,
                            const at::Tensor& t0, const at::Tensor& t1, const at::Tensor& t2, double offset,
                            std::vector<int64_t> shape) {
    ctx->save_for_backward({t0, t1, t2});
    ctx->saved_data["offset"] = offset;
    ctx->saved_data["shape"] = shape;
    const auto q = Format::weight(t0, t1, t2, offset, shape);
    const at::Tensor b = bias.numel() > 0 ? bias : at::Tensor();
    if (at::Tensor y = Format::product(x, q, b); y.defined()) return y;
    return at::linear(x, Format::dequantize(q, x.scalar_type()), b);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const auto q = Format::weight(saved[0], saved[1], saved[2], ctx->saved_data["offset"].toDouble(),
                                  ctx->saved_data["shape"].toIntVector());
    const at::Tensor& dy = grads[0];
    at::Tensor dx, db;
    if (ctx->needs_input_grad(0)) dx = at::matmul(dy, Format::dequantize(q, dy.scalar_type()));
    if (ctx->needs_input_grad(1)) db = dy.reshape({-1, dy.size(-1)}).sum(0);  // not for the empty "no bias"
    return {dx, db, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace llmtrain::ops::detail
