// NF4 (ops/nf4.h) against bitsandbytes' CPU build (tests/python/bnb_peer.py), for shapes with a
// partial last block of 64 and of 256: the same codes, second-level scales, offset and dynamic map,
// bit for bit; the same 8-bit absmax codes but where bitsandbytes' CPU search misses the nearest
// level (its binary search can land one below: there ours must be the nearer), and the same
// dequantized weights wherever those agree; the round trip within the format's bound; nf4_linear's
// forward and input gradient those of the dequantized weight; on a GPU, the kernels against the
// reference. int8 rows (ops/int8.h) against bitsandbytes' int8_vectorwise_quant the same way.
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <functional>

#include "llmtrain/core/fs.h"
#include "llmtrain/ops/int8.h"
#include "llmtrain/ops/nf4.h"
#include "test_util.h"

namespace {

namespace ops = llmtrain::ops;

using llmtrain::testing::bytes_file;

// bitsandbytes (tests/python/bnb_peer.py `mode`) quantizing the float32 matrix w, its files in `dir`.
int run_bnb(const std::string& mode, const torch::Tensor& w, const std::string& dir) {
  const std::string in = dir + "/w.bin";
  llmtrain::testing::write_floats(in, w);
  return llmtrain::testing::run_command("'" + llmtrain::testing::test_python() + "' '" +
                                        llmtrain::testing::test_source_dir() + "/tests/python/bnb_peer.py' " + mode +
                                        " '" + in + "' " + std::to_string(w.size(0)) + " " + std::to_string(w.size(1)) +
                                        " '" + dir + "' > /dev/null 2>&1");
}

// f(x) is x deq^T + b, forward and input gradient, within 1e-6 (fp32).
void expect_dequantized_product(const std::function<torch::Tensor(const torch::Tensor&)>& f, const torch::Tensor& deq,
                                const torch::Tensor& b) {
  const auto x = torch::randn({2, 3, deq.size(1)}).requires_grad_(), xr = x.detach().clone().requires_grad_();
  const auto y = f(x), yr = torch::nn::functional::linear(xr, deq, b);
  EXPECT_LT(llmtrain::testing::max_abs_diff(y, yr), 1e-6);
  const auto dy = torch::randn_like(y);
  y.backward(dy);
  yr.backward(dy);
  EXPECT_LT(llmtrain::testing::max_abs_diff(x.grad(), xr.grad()), 1e-6);
}

TEST(OpsNF4, QuantizesAsBitsandbytes) {
  torch::manual_seed(0);
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{3, 7}, {40, 50}, {130, 64}, {1000, 99}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    llmtrain::testing::TempDir t;
    // Heavy-tailed like trained weights, and a zero block.
    auto w = torch::randn({rows, cols}) * torch::rand({rows, 1}) * 0.05;
    if (w.numel() > 128) w.view(-1).narrow(0, 64, 64).zero_();
    ASSERT_EQ(run_bnb("nf4", w, t.path), 0);
    const auto q = ops::nf4_quantize(w);
    EXPECT_TRUE(torch::equal(q.packed, bytes_file(t.path + "/packed.bin")));
    EXPECT_TRUE(torch::equal(q.absmax2, llmtrain::testing::floats_file(t.path + "/absmax2.bin", q.absmax2.sizes())));
    EXPECT_EQ(float(q.offset), llmtrain::testing::floats_file(t.path + "/offset.bin", {1}).item<float>());
    const auto& dyn = ops::dynamic_map();
    EXPECT_TRUE(torch::equal(dyn, llmtrain::testing::floats_file(t.path + "/dynamic.bin", {256})));
    const int64_t n = w.numel(), blocks = (n + 63) / 64;
    const auto padded = torch::cat({w.view(-1).abs(), torch::zeros({blocks * 64 - n})}).view({blocks, 64});
    const auto theirs = bytes_file(t.path + "/absmax.bin").to(torch::kLong), ours = q.absmax_codes.to(torch::kLong);
    ASSERT_EQ(theirs.numel(), blocks);
    const auto scaled =
        (padded.amax(1) - float(q.offset)) / q.absmax2.repeat_interleave(ops::kNF4AbsmaxBlock).narrow(0, 0, blocks);
    const auto differ = ours.ne(theirs);
    EXPECT_LE(differ.sum().item<int64_t>(), std::max<int64_t>(2, blocks / 50)) << "codes that differ";
    // (A single block of absmaxes scales to 0 / 0: any code dequantizes to the offset there.)
    EXPECT_TRUE(((dyn.index_select(0, ours) - scaled).abs() <= (dyn.index_select(0, theirs) - scaled).abs() + 1e-6)
                    .logical_or(scaled.isnan())
                    .all()
                    .item<bool>())
        << "ours is the nearer level where they differ";
    const auto back = ops::nf4_dequantize(q, torch::kFloat);
    const auto same = differ.logical_not().repeat_interleave(64).narrow(0, 0, n);
    const auto want = llmtrain::testing::floats_file(t.path + "/dequantized.bin", w.sizes()).view(-1);
    EXPECT_TRUE(torch::equal(back.view(-1).masked_select(same), want.masked_select(same)));
    // The round trip: each value within half the widest gap between NF4's levels (-1 to -0.70) of its
    // block's absmax, plus that absmax's own error, which is within half the dynamic map's widest gap
    // (0.9 / 64, its top decade) of its second-level scale.
    const auto absmax = padded.amax(1);
    const auto absmax_back =
        dyn.index_select(0, ours) * q.absmax2.repeat_interleave(ops::kNF4AbsmaxBlock).narrow(0, 0, blocks) +
        float(q.offset);
    const auto absmax_error = (absmax_back - absmax).abs();
    EXPECT_TRUE((absmax_error <= q.absmax2.max() * (0.45 / 64) + 1e-7).all().item<bool>());
    const auto& levels = ops::nf4_levels();
    const double gap = (levels.narrow(0, 1, 15) - levels.narrow(0, 0, 15)).max().item<double>();
    EXPECT_NEAR(gap, 1 - 0.6961928009986877, 1e-7);
    const auto bound = (absmax * 0.5 * gap + absmax_error).repeat_interleave(64).narrow(0, 0, n);
    EXPECT_TRUE(((back - w).abs().view(-1) <= bound + 1e-6).all().item<bool>());
    if (n > 128) {
      EXPECT_EQ(back.view(-1).narrow(0, 64, 64).abs().max().item<float>(), 0.0f);
    }
  }
}

// int8 rows against bitsandbytes' int8_vectorwise_quant and _dequant: the same codes, row maxima and
// dequantized weights bit for bit; each value within half a step (absmax / 254) of the weight; an
// all-zero row stays zero; int8_linear is the dequantized weight's product, forward and backward.
TEST(OpsInt8, QuantizesAsBitsandbytesAndMultipliesAsTheDequantizedWeight) {
  torch::manual_seed(4);
  llmtrain::testing::TempDir t;
  const int64_t rows = 37, cols = 130;
  const auto w = torch::randn({rows, cols}) * torch::rand({rows, 1}) * 0.05;
  ASSERT_EQ(run_bnb("int8", w, t.path), 0);
  const auto q = ops::int8_quantize(w);
  EXPECT_TRUE(torch::equal(q.codes, bytes_file(t.path + "/codes.bin").view(torch::kChar).view({rows, cols})));
  EXPECT_TRUE(torch::equal(q.absmax, llmtrain::testing::floats_file(t.path + "/absmax.bin", {rows})));
  const auto back = ops::int8_dequantize(q, torch::kFloat);
  EXPECT_TRUE(torch::equal(back, llmtrain::testing::floats_file(t.path + "/dequantized.bin", {rows, cols})));
  EXPECT_TRUE(((back - w).abs() <= q.absmax.view({-1, 1}) / 254 * (1 + 1e-5)).all().item<bool>());
  auto z = w.clone();
  z[3].zero_();
  EXPECT_EQ(ops::int8_dequantize(ops::int8_quantize(z), torch::kFloat)[3].abs().max().item<float>(), 0.0f);
  const auto b = torch::randn({rows});
  expect_dequantized_product([&](const torch::Tensor& x) { return ops::int8_linear(x, q, b); }, back, b);
  llmtrain::testing::expect_error(
      [&] {
        ops::int8_linear(torch::randn({2, 7}), q);
      },
      {"int8_linear: x [2, 7] does not fit the weight [37, 130]"});
  llmtrain::testing::expect_error([&] { ops::int8_quantize(torch::randn({4})); },
                                  {"int8_quantize: expected a non-empty floating (out, in) matrix"});
  llmtrain::testing::expect_error(
      [&] {
        ops::int8_quantize(torch::full({2, 2}, NAN));
      },
      {"int8_quantize: the weight [2, 2] holds a value that is not finite"});
}

TEST(OpsNF4, LinearIsTheDequantizedProductForwardAndBackward) {
  torch::manual_seed(1);
  const auto w = torch::randn({24, 40}) * 0.1, b = torch::randn({24});
  const auto q = ops::nf4_quantize(w);
  const auto deq = ops::nf4_dequantize(q, torch::kFloat);
  expect_dequantized_product([&](const torch::Tensor& x) { return ops::nf4_linear(x, q, b); }, deq, b);
  llmtrain::testing::expect_error(
      [&] {
        ops::nf4_linear(torch::randn({2, 41}), q);
      },
      {"nf4_linear: x [2, 41] does not fit the weight (24, 40)"});
  llmtrain::testing::expect_error([&] { ops::nf4_quantize(torch::full({4}, NAN)); },
                                  {"nf4_quantize: the weight [4] holds a value that is not finite"});
}

}  // namespace

namespace {

ops::NF4Weight to_cuda(const ops::NF4Weight& q) {
  return {q.packed.cuda(), q.absmax_codes.cuda(), q.absmax2.cuda(), q.offset, q.shape};
}

}  // namespace

// The GPU's NF4: quantized on the device as on the CPU; dequantized by the kernel bit for bit as the
// reference (a tail of odd size too); the few-row product on the tensor cores (1 to 8 rows of bf16 or
// fp16, with and without bias) and the many-row path (dequantized weight and cuBLAS; float32 always),
// forward and input gradient, as the product with the dequantized weight. 40 x 8192 gives each warp of
// the few-row kernel several chunks; 80000 x 64 gives each of its blocks several turns.
TEST(OpsNF4, KernelsMatchTheReference_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  torch::manual_seed(2);
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{3, 7}, {130, 64}, {96, 192}, {1000, 2048}, {40, 8192}, {80000, 64}}) {
    SCOPED_TRACE(testing::Message() << rows << " x " << cols);
    const auto w = torch::randn({rows, cols}) * 0.05;
    const auto q = ops::nf4_quantize(w), qc = ops::nf4_quantize(w.cuda());
    EXPECT_TRUE(torch::equal(qc.packed.cpu(), q.packed));
    EXPECT_TRUE(torch::equal(qc.absmax_codes.cpu(), q.absmax_codes));
    // The absmaxes' mean (the offset) is a sum in another order on the device: the scales may differ by
    // an ulp or two.
    EXPECT_LE(llmtrain::testing::max_abs_diff(qc.absmax2.cpu(), q.absmax2),
              1e-6 * q.absmax2.abs().max().item<double>());
    EXPECT_NEAR(qc.offset, q.offset, 1e-6 * std::abs(q.offset));
    const auto g = to_cuda(q);
    for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf})
      EXPECT_TRUE(torch::equal(ops::nf4_dequantize(g, dtype).cpu(), ops::nf4_dequantize(q, dtype))) << dtype;
    if (cols % 64 != 0) continue;
    for (const auto dtype : {torch::kFloat, torch::kBFloat16, torch::kHalf}) {
      const auto deq = ops::nf4_dequantize(g, dtype);
      const auto b = torch::randn({rows}, torch::TensorOptions().device(torch::kCUDA).dtype(dtype));
      const double tol = dtype == torch::kFloat ? 1e-4 : 2e-2;
      for (const int64_t m : {1, 2, 5, 8, 64}) {  // the few-row kernel up to 8 rows (bf16, fp16), cuBLAS past
        SCOPED_TRACE(testing::Message() << m << " rows, " << dtype);
        const auto x = torch::randn({m, cols}, torch::TensorOptions().device(torch::kCUDA).dtype(dtype));
        for (const bool with_bias : {false, true}) {
          const auto y = ops::nf4_linear(x, g, with_bias ? b : torch::Tensor());
          const auto want = torch::nn::functional::linear(x.to(torch::kFloat), deq.to(torch::kFloat),
                                                          with_bias ? b.to(torch::kFloat) : torch::Tensor());
          EXPECT_LT(llmtrain::testing::max_abs_diff(y, want), tol * (1 + want.abs().max().item<double>()));
        }
        const auto xg = x.detach().clone().requires_grad_();
        const auto dy = torch::randn({m, rows}, x.options());
        ops::nf4_linear(xg, g).backward(dy);
        EXPECT_LT(llmtrain::testing::max_abs_diff(xg.grad(), dy.to(torch::kFloat).mm(deq.to(torch::kFloat))),
                  tol * (1 + xg.grad().abs().max().item<double>()));
      }
    }
  }
}
