// The CUDA paths of the ops against their ATen reference (float64 on the CPU), on fresh random inputs
// of awkward sizes, contiguous and strided, forward and backward, at DESIGN.md's tolerances.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "llmtrain/ops/adamw.h"
#include "llmtrain/ops/cross_entropy.h"
#include "llmtrain/ops/layer_norm.h"
#include "test_util.h"

namespace ops = llmtrain::ops;

namespace {

constexpr int64_t kRows[] = {1, 7, 113, 1023};

// Relative tolerance of a result in `dtype`, DESIGN.md's (reductions).
double tolerance(torch::Dtype dtype) { return dtype == torch::kFloat ? 1e-5 : dtype == torch::kHalf ? 1e-3 : 1.6e-2; }

}  // namespace

TEST(OpsCrossEntropy, FusedClassifierMatchesReference_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  struct Shape {
    int64_t classes, cols, ld;  // ld > cols: rows strided inside a wider tensor
  };
  // GPT-2's padded vocabulary (vector path), an odd width (element path), strided rows, a tiny one.
  const Shape shapes[] = {{50257, 50304, 50304}, {999, 999, 999}, {1000, 1000, 1024}, {5, 8, 8}};
  for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf})
    for (const auto& s : shapes)
      for (int64_t rows : kRows) {
        if (s.classes > 10000 && rows > 113) continue;  // keep the float64 reference quick
        SCOPED_TRACE(testing::Message() << dtype << " rows " << rows << " classes " << s.classes << " cols " << s.cols
                                        << " ld " << s.ld);
        const auto wide = (3 * torch::randn({rows, s.ld}, torch::kDouble)).to(dtype);
        const auto host = wide.narrow(1, 0, s.cols);  // (rows, cols), rows s.ld apart
        auto targets = torch::randint(s.classes, {rows}, torch::kLong);
        if (rows > 2) targets.index_put_({torch::indexing::Slice(0, rows / 3)}, ops::kIgnoreIndex);

        // Reference: float64 on the CPU, from the same (rounded) logits.
        const auto ref_in = host.to(torch::kDouble).clone().requires_grad_();
        const auto ref = ops::cross_entropy(ref_in, targets, ops::kIgnoreIndex, s.classes);
        (2.5 * ref).backward();

        const auto dev_wide = wide.to(torch::kCUDA);
        const auto dev_in = dev_wide.narrow(1, 0, s.cols).detach().requires_grad_();
        ASSERT_EQ(dev_in.stride(0), s.ld);
        const auto loss = ops::cross_entropy(dev_in, targets.to(torch::kCUDA), ops::kIgnoreIndex, s.classes);
        (2.5 * loss).backward();

        const double tol = tolerance(dtype);
        EXPECT_NEAR(loss.item<double>(), ref.item<double>(), tol * std::abs(ref.item<double>()) + 1e-5);
        const auto grad = dev_in.grad().to(torch::kCPU, torch::kDouble);
        const auto want = ref_in.grad();
        EXPECT_TRUE(torch::allclose(grad, want, tol, 1e-5 + tol * want.abs().max().item<double>()))
            << "max diff " << (grad - want).abs().max().item<double>();
        if (s.cols > s.classes)  // the padding gets exactly zero
          EXPECT_EQ(grad.narrow(1, s.classes, s.cols - s.classes).abs().max().item<double>(), 0.0);
      }
}

TEST(OpsCrossEntropy, FusedClassifierEdgeCases_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  const auto opts = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  // Every target ignored: NaN, as PyTorch gives.
  const auto logits = torch::randn({4, 64}, opts);
  EXPECT_TRUE(
      std::isnan(ops::cross_entropy(logits, torch::full({4}, ops::kIgnoreIndex, torch::kLong).cuda()).item<double>()));
  // A target outside the classes: NaN, never a read outside the row.
  EXPECT_TRUE(std::isnan(ops::cross_entropy(logits, torch::tensor({1, 2, 64, 3}, torch::kLong).cuda()).item<double>()));
  // A non-unit column stride takes the reference path and still gives the right loss.
  const auto cols_strided = torch::randn({64, 4}, opts).t();  // (4, 64), column stride 4
  const auto t = torch::randint(64, {4}, torch::kLong).cuda();
  EXPECT_NEAR(ops::cross_entropy(cols_strided, t).item<double>(),
              ops::cross_entropy(cols_strided.contiguous(), t).item<double>(), 1e-3);
  // Zero rows.
  const auto empty = torch::randn({0, 64}, opts).requires_grad_();
  EXPECT_TRUE(std::isnan(ops::cross_entropy(empty, torch::zeros({0}, torch::kLong).cuda()).item<double>()));
}

namespace {

struct AdamWCase {
  std::vector<torch::Tensor> masters, grads, exp_avgs, exp_avg_sqs, params;
  std::vector<double> decays;
  AdamWCase to(torch::Device d) const {
    AdamWCase c;
    const auto move = [&](const std::vector<torch::Tensor>& from, std::vector<torch::Tensor>& into) {
      for (const auto& t : from) into.push_back(t.to(d).clone());
    };
    move(masters, c.masters);
    move(grads, c.grads);
    move(exp_avgs, c.exp_avgs);
    move(exp_avg_sqs, c.exp_avg_sqs);
    move(params, c.params);
    c.decays = decays;
    return c;
  }
  void step(int64_t n, double inv_scale, double clip) {
    llmtrain::ops::AdamWHyper h;
    h.lr = 1e-2;
    h.beta1 = 0.9;
    h.beta2 = 0.95;
    h.step = n;
    const auto ns = llmtrain::ops::grad_norm_scale(grads, inv_scale, clip);
    llmtrain::ops::adamw_step(masters, grads, exp_avgs, exp_avg_sqs, params, decays, h, ns);
  }
};

AdamWCase make_case(torch::Dtype grad_dtype, bool bf16_params) {
  AdamWCase c;
  // Awkward sizes: one element, odd, a chunk and one more, several chunks.
  for (int64_t n : {1, 7, 113, 65537, 200003}) {
    c.masters.push_back(torch::randn({n}));
    c.grads.push_back((1e3 * torch::randn({n})).to(grad_dtype));  // a scaled loss's gradients
    c.exp_avgs.push_back(0.01 * torch::randn({n}));
    c.exp_avg_sqs.push_back(0.01 * torch::rand({n}));
    if (bf16_params) c.params.push_back(c.masters.back().to(torch::kBFloat16));
    c.decays.push_back(n % 2 ? 0.1 : 0.0);
  }
  return c;
}

}  // namespace

TEST(OpsAdamW, FusedStepMatchesReference_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  for (const auto grad_dtype : {torch::kFloat, torch::kBFloat16})
    for (const bool bf16_params : {false, true}) {
      SCOPED_TRACE(testing::Message() << grad_dtype << (bf16_params ? " with bf16 params" : ""));
      AdamWCase cpu = make_case(grad_dtype, bf16_params);
      AdamWCase gpu = cpu.to(torch::kCUDA);
      // inv_scale 1/1024 (fp16 loss scaling) and clipping at 1.0, which binds: the norm is ~600.
      const auto ns_cpu = llmtrain::ops::grad_norm_scale(cpu.grads, 1.0 / 1024, 1.0);
      const auto ns_gpu = llmtrain::ops::grad_norm_scale(gpu.grads, 1.0 / 1024, 1.0).cpu();
      EXPECT_NEAR(ns_gpu[0].item<double>(), ns_cpu[0].item<double>(), 1e-5 * ns_cpu[0].item<double>());
      EXPECT_NEAR(ns_gpu[1].item<double>(), ns_cpu[1].item<double>(), 1e-5 * ns_cpu[1].item<double>());
      for (int64_t s = 1; s <= 3; ++s) {
        cpu.step(s, 1.0 / 1024, 1.0);
        gpu.step(s, 1.0 / 1024, 1.0);
      }
      for (size_t i = 0; i < cpu.masters.size(); ++i) {
        EXPECT_TRUE(torch::allclose(gpu.masters[i].cpu(), cpu.masters[i], 1.3e-6, 1e-5)) << "master " << i;
        EXPECT_TRUE(torch::allclose(gpu.exp_avgs[i].cpu(), cpu.exp_avgs[i], 1.3e-6, 1e-6)) << "exp_avg " << i;
        EXPECT_TRUE(torch::allclose(gpu.exp_avg_sqs[i].cpu(), cpu.exp_avg_sqs[i], 1.3e-6, 1e-9)) << "exp_avg_sq " << i;
        if (bf16_params) EXPECT_TRUE(torch::equal(gpu.params[i], gpu.masters[i].to(torch::kBFloat16))) << "param " << i;
      }
    }
}

TEST(OpsAdamW, NonFiniteGradientMakesTheFusedStepANoOp_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  AdamWCase c = make_case(torch::kBFloat16, true).to(torch::kCUDA);
  c.grads[3][5] = INFINITY;
  const AdamWCase before = c.to(torch::kCUDA);
  const auto ns = llmtrain::ops::grad_norm_scale(c.grads, 1.0, 1.0);
  EXPECT_TRUE(std::isinf(ns[0].item<double>()));
  EXPECT_TRUE(std::isnan(ns[1].item<double>()));
  c.step(1, 1.0, 1.0);
  for (size_t i = 0; i < c.masters.size(); ++i) {
    EXPECT_TRUE(torch::equal(c.masters[i], before.masters[i])) << i;
    EXPECT_TRUE(torch::equal(c.exp_avgs[i], before.exp_avgs[i])) << i;
    EXPECT_TRUE(torch::equal(c.params[i], before.params[i])) << i;
  }
  // A non-contiguous gradient is refused by name, never read wrongly.
  c.grads[4] = torch::randn({200003 * 2}, torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16))
                   .slice(0, 0, 400006, 2);
  llmtrain::testing::expect_error([&] { c.step(1, 1.0, 1.0); }, {"grads[4]", "contiguous"});
}

TEST(OpsLayerNorm, KernelsMatchReference_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  const std::pair<torch::Dtype, torch::Dtype> types[] = {{torch::kFloat, torch::kFloat},
                                                         {torch::kBFloat16, torch::kBFloat16},
                                                         {torch::kBFloat16, torch::kFloat},
                                                         {torch::kHalf, torch::kHalf}};
  for (const auto& [xt, wt] : types)
    for (int64_t C : {3, 7, 768, 1600, 4096})
      for (int64_t rows : kRows) {
        SCOPED_TRACE(testing::Message() << xt << "/" << wt << " rows " << rows << " C " << C);
        const auto x = (2 * torch::randn({rows, C}, torch::kDouble) + 0.5).to(xt);
        const auto w = (1 + 0.3 * torch::randn({C}, torch::kDouble)).to(wt),
                   b = (0.2 * torch::randn({C}, torch::kDouble)).to(wt);
        const auto dout = torch::randn({rows, C}, torch::kDouble).to(xt);
        // Reference: float64 on the CPU from the same rounded inputs.
        auto rx = x.to(torch::kDouble).requires_grad_(), rw = w.to(torch::kDouble).requires_grad_(),
             rb = b.to(torch::kDouble).requires_grad_();
        const auto ry = ops::layer_norm(rx, rw, rb);
        ry.backward(dout.to(torch::kDouble));
        // Kernels: x transposed twice, so the op sees a non-contiguous (rows, C) view.
        auto gx = x.to(torch::kCUDA).t().contiguous().t().requires_grad_();
        auto gw = w.to(torch::kCUDA).requires_grad_(), gb = b.to(torch::kCUDA).requires_grad_();
        const auto gy = ops::layer_norm(gx, gw, gb);
        ASSERT_EQ(gy.scalar_type(), xt);
        gy.backward(dout.to(torch::kCUDA));
        const double tol = tolerance(xt);
        const auto near = [&](const torch::Tensor& got, const torch::Tensor& want, const char* what) {
          const auto g = got.to(torch::kCPU, torch::kDouble);
          EXPECT_TRUE(torch::allclose(g, want, tol, 1e-5 + tol * want.abs().max().item<double>()))
              << what << " max diff " << (g - want).abs().max().item<double>();
        };
        near(gy, ry.detach(), "y");
        near(gx.grad(), rx.grad(), "dx");
        near(gw.grad(), rw.grad(), "dweight");
        near(gb.grad(), rb.grad(), "dbias");
      }
}

TEST(OpsLayerNorm, BackwardIsReproducibleBitForBit_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  const auto cuda = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kBFloat16);
  const auto x = torch::randn({16 * 1024, 768}, cuda).requires_grad_();
  const auto w = torch::randn({768}, cuda).requires_grad_(), b = torch::randn({768}, cuda).requires_grad_();
  const auto dout = torch::randn({16 * 1024, 768}, cuda);
  std::vector<torch::Tensor> dw;
  for (int i = 0; i < 2; ++i) {
    w.mutable_grad() = torch::Tensor();
    ops::layer_norm(x, w, b).backward(dout);
    dw.push_back(w.grad().clone());
  }
  EXPECT_TRUE(torch::equal(dw[0], dw[1]));
}
