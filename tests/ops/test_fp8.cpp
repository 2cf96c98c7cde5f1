// fp8 products (ops/fp8.h) against the formats as published (OCP 8-bit floating point: e4m3fn with 4
// exponent bits of bias 7, 3 mantissa bits, no infinities, 448 the largest; e5m2 with bias 15, 2
// mantissa bits, 57344 the largest finite), enumerated from their bits here and rounded to nearest even
// by a search of the test's own; the linear layer as the float64 product of those codes, forward and
// backward, its amax bookkeeping, and the delayed scales' update; on a GPU, the CUDA path (fp8 casts and
// cuBLASLt's fp8 products) against the reference path.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <tuple>
#include <vector>

#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#include "llmtrain/ops/fp8.h"
#include "test_util.h"

namespace {

namespace ops = llmtrain::ops;

struct Level {
  double value;
  bool even;  // the mantissa's last bit is 0
};

// The non-negative finite values of a format with e exponent and m mantissa bits, ascending; `fn`: the
// all-ones exponent holds numbers too, but for the all-ones mantissa (e4m3fn), else it is inf and NaN.
std::vector<Level> levels(int e, int m, bool fn) {
  const int bias = (1 << (e - 1)) - 1;
  std::vector<Level> out;
  for (int ex = 0; ex < (1 << e); ++ex)
    for (int man = 0; man < (1 << m); ++man) {
      if (ex == (1 << e) - 1 && (!fn || man == (1 << m) - 1)) continue;
      const double frac = double(man) / (1 << m);
      const double v = ex == 0 ? std::ldexp(frac, 1 - bias) : std::ldexp(1 + frac, ex - bias);
      out.push_back({v, man % 2 == 0});
    }
  return out;
}

// v rounded to nearest even among the levels, saturated at the largest.
double round_to(const std::vector<Level>& ls, double v) {
  const double a = std::min(std::abs(v), ls.back().value);
  const auto hi = std::lower_bound(ls.begin(), ls.end(), a, [](const Level& l, double x) { return l.value < x; });
  if (hi->value == a || hi == ls.begin()) return std::copysign(hi->value, v);
  const auto lo = hi - 1;
  const double dl = a - lo->value, dh = hi->value - a;
  const Level& pick = dl < dh ? *lo : dh < dl ? *hi : (lo->even ? *lo : *hi);
  return std::copysign(pick.value, v);
}

TEST(OpsFp8, CodesRoundAsTheFormatsArePublished) {
  for (const auto& [type, ls] :
       {std::pair{at::kFloat8_e4m3fn, levels(4, 3, true)}, std::pair{at::kFloat8_e5m2, levels(5, 2, false)}}) {
    SCOPED_TRACE(testing::Message() << type);
    EXPECT_EQ(ls.back().value, type == at::kFloat8_e4m3fn ? ops::kE4M3Max : ops::kE5M2Max);
    // Every level, every midpoint between two (the ties), a little either side of them, values past
    // the largest, and random ones over the whole range, each under a scale.
    std::vector<float> xs;
    for (size_t i = 0; i + 1 < ls.size(); ++i) {
      const double mid = (ls[i].value + ls[i + 1].value) / 2;
      for (const double v : {ls[i].value, mid, mid * (1 + 1e-6), mid * (1 - 1e-6)}) {
        xs.push_back(float(v));
        xs.push_back(float(-v));
      }
    }
    for (const double v : {1e6, 500.0, 6e4, 1e-12}) xs.push_back(float(v));
    const auto random = torch::randn({4096}) * torch::exp(torch::randn({4096}) * 4);
    for (int64_t i = 0; i < random.numel(); ++i) xs.push_back(random[i].item<float>());
    const auto x = torch::tensor(xs);
    for (const double s : {1.0, 0.25, 3.0}) {
      const auto codes = ops::fp8_codes(x / s, torch::tensor({float(s)}), type).to(torch::kDouble);
      ASSERT_EQ(ops::fp8_codes(x, torch::ones({1}), type).scalar_type(), type);
      int wrong = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        const double scaled = double(float(double(float(xs[i] / s)) * s));  // x / s * s as float32 computes it
        const double want = round_to(ls, scaled), got = codes[i].item<double>();
        if (want != got && wrong++ < 5) ADD_FAILURE() << xs[i] << " / " << s << ": want " << want << ", got " << got;
      }
    }
  }
}

// The float64 product of the codes under the scales: what fp8_linear must compute.
torch::Tensor code_product(const torch::Tensor& a, double sa, const torch::Tensor& b, double sb,
                           at::ScalarType ta = at::kFloat8_e4m3fn, at::ScalarType tb = at::kFloat8_e4m3fn) {
  const auto qa = ops::fp8_codes(a, torch::tensor({float(sa)}), ta).to(torch::kDouble) / sa;
  const auto qb = ops::fp8_codes(b, torch::tensor({float(sb)}), tb).to(torch::kDouble) / sb;
  return torch::matmul(qa, qb.t());
}

TEST(OpsFp8, LinearIsTheProductOfItsCodesForwardAndBackward) {
  torch::manual_seed(3);
  auto s = ops::fp8_scaling(4, torch::kCPU);
  s.scale.copy_(torch::tensor({2.f, 64.f, 1024.f}));
  const auto x = torch::randn({2, 5, 48}).requires_grad_(), w = (torch::randn({24, 48}) * 0.1).requires_grad_(),
             b = torch::randn({24}).requires_grad_();
  const auto y = ops::fp8_linear(x, w, b, s);
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{2, 5, 24}));
  const auto want = code_product(x.detach(), 2, w.detach(), 64) + b.detach().to(torch::kDouble);
  EXPECT_LT(llmtrain::testing::max_abs_diff(y, want), 1e-5 * (1 + want.abs().max().item<double>()));
  const auto dy = torch::randn_like(y) * 0.01;
  y.backward(dy);
  // dx = dy W, dW = dy^T x, each of the codes (dy in e5m2); db = the sum of dy as it came.
  const auto dx = code_product(dy, 1024, w.detach().t().contiguous(), 64, at::kFloat8_e5m2);
  const auto dw = code_product(dy.reshape({-1, 24}).t().contiguous(), 1024,
                               x.detach().reshape({-1, 48}).t().contiguous(), 2, at::kFloat8_e5m2);
  EXPECT_LT(llmtrain::testing::max_abs_diff(x.grad(), dx), 1e-5 * (1 + dx.abs().max().item<double>()));
  EXPECT_LT(llmtrain::testing::max_abs_diff(w.grad(), dw), 1e-5 * (1 + dw.abs().max().item<double>()));
  EXPECT_LT(llmtrain::testing::max_abs_diff(b.grad(), dy.reshape({-1, 24}).sum(0)), 1e-5);
  // The amaxes went into column 0; a second call of the step keeps the larger.
  const auto h = s.amax_history;
  EXPECT_EQ(h[0][0].item<float>(), x.abs().max().item<float>());
  EXPECT_EQ(h[1][0].item<float>(), w.abs().max().item<float>());
  EXPECT_EQ(h[2][0].item<float>(), dy.abs().max().item<float>());
  EXPECT_EQ(h.narrow(1, 1, 3).abs().sum().item<float>(), 0.f);
  ops::fp8_linear(x.detach() * 0.5, w.detach(), {}, s);
  EXPECT_EQ(h[0][0].item<float>(), x.abs().max().item<float>());
  ops::fp8_linear(x.detach() * 3, w.detach(), {}, s);
  EXPECT_EQ(h[0][0].item<float>(), 3 * x.abs().max().item<float>());
  // bf16 operands give bf16 results and gradients.
  const auto xb = x.detach().to(torch::kBFloat16).requires_grad_(), wb = w.detach().to(torch::kBFloat16);
  const auto yb = ops::fp8_linear(xb, wb, {}, s);
  EXPECT_EQ(yb.scalar_type(), torch::kBFloat16);
  yb.sum().backward();
  EXPECT_EQ(xb.grad().scalar_type(), torch::kBFloat16);
}

TEST(OpsFp8, ScaledProductsStayWithinTheFormatsError) {
  // Scales from the amaxes (the update after one step) put each tensor's largest value at the top of its
  // format: then the product's error is that of e4m3's rounding, a relative 2^-4 a value at most.
  torch::manual_seed(4);
  const auto x = torch::randn({64, 256}), w = torch::randn({128, 256}) * 0.05;
  auto s = ops::fp8_scaling(2, torch::kCPU);
  ops::fp8_linear(x, w, {}, s);
  ops::fp8_update_scales(s, 0);
  EXPECT_NEAR(s.scale[0].item<double>(), ops::kE4M3Max / x.abs().max().item<double>(),
              1e-4 * s.scale[0].item<double>());
  const auto exact = torch::matmul(x.to(torch::kDouble), w.to(torch::kDouble).t());
  const double err =
      (ops::fp8_linear(x, w, {}, s).to(torch::kDouble) - exact).norm().item<double>() / exact.norm().item<double>();
  EXPECT_LT(err, 0.04);
  EXPECT_GT(err, 1e-3);  // and it is fp8's error: far above float32's
  // Scales far too large saturate: the error is then much larger.
  s.scale.fill_(1e4);
  const double saturated =
      (ops::fp8_linear(x, w, {}, s).to(torch::kDouble) - exact).norm().item<double>() / exact.norm().item<double>();
  EXPECT_GT(saturated, 10 * err);
}

// Before the first update, the first training pass takes each unset scale from its own tensor (scale 1
// would put these weights among e4m3's subnormals and these gradients below e5m2's smallest value), on
// both paths; evaluation before it takes the same scales for its call and leaves them unset; without
// first_pass an unset scale casts as 1.
TEST(OpsFp8, TheFirstPassScalesItsOwnTensors) {
  std::vector<torch::Device> devices = {torch::kCPU};
  if (torch::cuda::is_available()) devices.push_back(torch::kCUDA);
  for (const auto& device : devices) {
    SCOPED_TRACE(device.str());
    torch::manual_seed(8);
    const auto opt = torch::TensorOptions().device(device).dtype(torch::kBFloat16);
    const auto x0 = torch::randn({64, 64}, opt), w0 = torch::randn({32, 64}, opt) * 0.01;
    const auto dy = torch::randn({64, 32}, opt) * 1e-6;
    const auto amax = [](const torch::Tensor& t) { return t.abs().max().to(torch::kFloat).item<double>(); };
    const auto exact = torch::matmul(x0.to(torch::kDouble), w0.to(torch::kDouble).t());
    const auto error = [&](const torch::Tensor& y) {
      return (y.to(torch::kDouble) - exact).norm().item<double>() / exact.norm().item<double>();
    };
    auto s = ops::fp8_scaling(2, device);
    {
      torch::NoGradGuard no_grad;
      const double e = error(ops::fp8_linear(x0, w0, {}, s));
      EXPECT_LT(e, 0.05) << "evaluation takes the first-pass scales";
      EXPECT_EQ(s.scale.abs().sum().item<float>(), 0.f) << "and leaves them unset";
    }
    const auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_();
    const auto y = ops::fp8_linear(x, w, {}, s);
    y.backward(dy);
    const auto scale = s.scale.cpu();
    EXPECT_NEAR(scale[0].item<double>(), ops::kE4M3Max / amax(x0), 1e-3 * scale[0].item<double>());
    EXPECT_NEAR(scale[1].item<double>(), ops::kE4M3Max / amax(w0), 1e-3 * scale[1].item<double>());
    EXPECT_NEAR(scale[2].item<double>(), ops::kE5M2Max / amax(dy), 1e-3 * scale[2].item<double>());
    EXPECT_LT(error(y), 0.05);
    const auto want_dw = torch::matmul(dy.to(torch::kDouble).t(), x0.to(torch::kDouble));
    const double dw_error =
        (w.grad().to(torch::kDouble) - want_dw).norm().item<double>() / want_dw.norm().item<double>();
    EXPECT_LT(dw_error, 0.1);
    // Without first_pass (as the layer holds it after that pass) an unset scale casts as 1: the same
    // gradient's codes lose most of it (e5m2's smallest value is 2^-16).
    auto unset = ops::fp8_scaling(2, device);
    unset.first_pass = false;
    const auto w1 = w0.clone().requires_grad_();
    ops::fp8_linear(x0, w1, {}, unset).backward(dy);
    EXPECT_EQ(unset.scale.abs().sum().item<float>(), 0.f);
    const double dw1_error =
        (w1.grad().to(torch::kDouble) - want_dw).norm().item<double>() / want_dw.norm().item<double>();
    EXPECT_GT(dw1_error, 0.3);
  }
}

TEST(OpsFp8, ScalesFollowTheAmaxHistory) {
  auto s = ops::fp8_scaling(3, torch::kCPU);
  EXPECT_TRUE(torch::equal(s.scale, torch::zeros({3})));  // unset
  s.scale.fill_(1);
  s.amax_history.copy_(torch::tensor({{2.f, 8.f, 1.f}, {0.f, 0.f, 0.f}, {100.f, 3.f, 4.f}}));
  ops::fp8_update_scales(s, 0);
  EXPECT_FLOAT_EQ(s.scale[0].item<float>(), float(ops::kE4M3Max / 8));
  EXPECT_FLOAT_EQ(s.scale[1].item<float>(), 1.f);  // no amax yet: unchanged
  EXPECT_FLOAT_EQ(s.scale[2].item<float>(), float(ops::kE5M2Max / 100));
  EXPECT_TRUE(torch::equal(s.amax_history, torch::tensor({{0.f, 2.f, 8.f}, {0.f, 0.f, 0.f}, {0.f, 100.f, 3.f}})));
  ops::fp8_update_scales(s, 2);  // the margin: 2^2 below
  EXPECT_FLOAT_EQ(s.scale[0].item<float>(), float(ops::kE4M3Max / 8 / 4));
  EXPECT_FLOAT_EQ(s.scale[2].item<float>(), float(ops::kE5M2Max / 100 / 4));
  // An amax so small that the scale would overflow float32 leaves the scale as it was.
  s.amax_history.fill_(0).select(1, 0).fill_(1e-40f);
  const auto before = s.scale.clone();
  ops::fp8_update_scales(s, 0);
  EXPECT_TRUE(torch::equal(s.scale, before));
}

// The same codes on both paths: the same amaxes to the bit, and products that differ only in the order
// of their float32 sums (and the forward's faster accumulation) before the output's rounding to bf16.
// Shapes off the cast's 64-wide tiles; inputs that saturate; a row count that cuBLASLt's fp8 products
// do not take (not a multiple of 16) goes to the reference path.
TEST(OpsFp8, CudaPathComputesTheReferenceProducts_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  torch::manual_seed(5);
  const auto opt = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  for (const auto& [rows, in, out] :
       {std::tuple<int64_t, int64_t, int64_t>{128, 64, 96}, {48, 80, 144}, {16 * 37, 272, 48}, {10, 64, 32}}) {
    SCOPED_TRACE(std::to_string(rows) + " x " + std::to_string(in) + " -> " + std::to_string(out));
    const auto x0 = torch::randn({2, rows / 2, in}, opt) * 2, w0 = torch::randn({out, in}, opt) * 0.1,
               b0 = torch::randn({out}, opt), dy = torch::randn({2, rows / 2, out}, opt) * 1e-3;
    struct Result {
      torch::Tensor y, dx, dw, db, history, scale;
    };
    const auto run = [&](bool kernels) {
      ops::set_cuda_kernel_enabled(ops::Kernel::kFp8, kernels);
      auto s = ops::fp8_scaling(2, torch::kCUDA);
      s.scale.copy_(torch::tensor({128.f, 2048.f, 4e6f}));  // x saturates above 3.5
      const auto x = x0.clone().requires_grad_(), w = w0.clone().requires_grad_(), b = b0.clone().requires_grad_();
      const auto y = ops::fp8_linear(x, w, b, s);
      y.backward(dy);
      ops::fp8_update_scales(s, 0);
      return Result{y.detach(), x.grad(), w.grad(), b.grad(), s.amax_history.clone(), s.scale.clone()};
    };
    const Result ref = run(false), got = run(true);
    EXPECT_EQ(got.y.scalar_type(), torch::kBFloat16);
    EXPECT_EQ(got.y.sizes(), ref.y.sizes());
    EXPECT_EQ(got.dx.sizes(), ref.dx.sizes());
    const auto near = [](const torch::Tensor& a, const torch::Tensor& b) {
      return llmtrain::testing::max_abs_diff(a.to(torch::kFloat), b.to(torch::kFloat)) <=
             1e-2 * b.abs().max().item<double>();
    };
    EXPECT_TRUE(near(got.y, ref.y));
    EXPECT_TRUE(near(got.dx, ref.dx));
    EXPECT_TRUE(near(got.dw, ref.dw));
    EXPECT_TRUE(near(got.db, ref.db));
    EXPECT_TRUE(torch::equal(got.history, ref.history)) << got.history << ref.history;
    EXPECT_TRUE(torch::equal(got.scale, ref.scale)) << got.scale << ref.scale;
    if (rows % 16 != 0) {
      EXPECT_TRUE(torch::equal(got.y, ref.y)) << "not the reference path";
    }
  }
  // Without grad mode (evaluation, sampling) no amax is recorded.
  torch::NoGradGuard no_grad;
  auto s = ops::fp8_scaling(2, torch::kCUDA);
  ops::fp8_linear(torch::randn({32, 64}, opt), torch::randn({32, 64}, opt), {}, s);
  EXPECT_EQ(s.amax_history.abs().sum().item<float>(), 0.f);
  ops::set_cuda_kernel_enabled(ops::Kernel::kFp8, true);  // as at start
}

// One launch moves every layer on as the reference does, layer by layer: zero and NaN amaxes keep their
// scales, a tiny one whose scale would overflow too, and the history shifts.
TEST(OpsFp8, CudaScaleUpdateIsTheReferences_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  torch::manual_seed(6);
  std::vector<ops::Fp8Scaling> kernel, reference;
  for (int i = 0; i < 70; ++i) {
    auto s = ops::fp8_scaling(5, torch::kCUDA);
    s.amax_history.copy_(torch::rand({3, 5}) * std::pow(10.0, i % 7 - 3));
    s.scale.copy_(torch::rand({3}) + 0.5);
    if (i % 5 == 1) s.amax_history[1].zero_();
    if (i % 5 == 2) s.amax_history[2].fill_(0)[3] = 1e-40f;
    if (i % 5 == 3) s.amax_history[0][2] = std::nanf("");
    kernel.push_back(s);
    reference.push_back({s.amax_history.clone(), s.scale.clone()});
  }
  for (int step = 0; step < 3; ++step) {
    ops::set_cuda_kernel_enabled(ops::Kernel::kFp8, true);
    ops::fp8_update_scales(kernel, 1);
    ops::set_cuda_kernel_enabled(ops::Kernel::kFp8, false);
    ops::fp8_update_scales(reference, 1);
  }
  ops::set_cuda_kernel_enabled(ops::Kernel::kFp8, true);  // as at start
  for (size_t i = 0; i < kernel.size(); ++i) {
    EXPECT_TRUE(torch::equal(kernel[i].scale, reference[i].scale)) << i << kernel[i].scale << reference[i].scale;
    EXPECT_TRUE(torch::allclose(kernel[i].amax_history, reference[i].amax_history, 0, 0, /*equal_nan=*/true)) << i;
  }
}

TEST(OpsFp8, BadInputIsNamed) {
  auto s = ops::fp8_scaling(2, torch::kCPU);
  const auto x = torch::randn({3, 8});
  llmtrain::testing::expect_error(
      [&] {
        ops::fp8_linear(x, torch::randn({4, 9}), {}, s);
      },
      {"does not match the weight"});
  llmtrain::testing::expect_error(
      [&] {
        ops::fp8_linear(x, torch::randn({4, 8}), torch::randn({5}), s);
      },
      {"bias must be (4)"});
  llmtrain::testing::expect_error(
      [&] {
        ops::fp8_linear(x, torch::randn({4, 8}, torch::kDouble), {}, s);
      },
      {"one floating dtype"});
  llmtrain::testing::expect_error(
      [&] {
        ops::fp8_linear(x, torch::randn({4, 8}), {}, {torch::zeros({2, 2}), s.scale});
      },
      {"amax history (3, H >= 1)"});
  llmtrain::testing::expect_error([&] { ops::fp8_scaling(0, torch::kCPU); }, {"at least one step"});
  llmtrain::testing::expect_error([&] { ops::fp8_update_scales(s, -1); }, {"margin must be in [0, 64]"});
  llmtrain::testing::expect_error([&] { ops::fp8_codes(x, torch::ones({1}), at::kHalf); }, {"e4m3fn or e5m2"});
}

}  // namespace
