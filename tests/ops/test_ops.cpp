// The reference paths of the ops against the textbook formulas, in float64 on fresh random inputs
// of awkward sizes, contiguous and strided, forward and backward (finite differences).
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>

#include "../../kernels/common/rounding.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/adamw.h"
#include "llmtrain/ops/attention.h"
#include "llmtrain/ops/cross_entropy.h"
#include "llmtrain/ops/dispatch.h"
#include "llmtrain/ops/embedding.h"
#include "llmtrain/ops/gelu.h"
#include "llmtrain/ops/layer_norm.h"
#include "llmtrain/ops/linear.h"
#include "llmtrain/ops/mlp.h"
#include "test_util.h"

namespace ops = llmtrain::ops;
using llmtrain::testing::expect_gradients_match;
using llmtrain::testing::max_abs_diff;

namespace {

const auto kF64 = torch::TensorOptions().dtype(torch::kDouble);
constexpr int64_t kRows[] = {1, 7, 113, 1023};

torch::Tensor gelu_formula(const torch::Tensor& x) {
  return 0.5 * x * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x.pow(3))));
}

torch::Tensor layer_norm_formula(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b, double eps) {
  const auto mean = x.mean(-1, true);
  const auto var = (x - mean).pow(2).mean(-1, true);
  return (x - mean) / torch::sqrt(var + eps) * w + b;
}

torch::Tensor attention_formula(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v) {
  const int64_t T = q.size(2);
  auto scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(q.size(-1)));
  const auto future = torch::ones({T, T}, torch::kBool).triu(1);
  return torch::matmul(torch::softmax(scores.masked_fill(future, -INFINITY), -1), v);
}

}  // namespace

TEST(OpsGelu, MatchesTanhFormula) {
  for (int64_t rows : kRows) {
    const auto x = 3 * torch::randn({rows, 37}, kF64);
    EXPECT_LT(max_abs_diff(ops::gelu(x), gelu_formula(x)), 1e-12) << rows << " rows";
  }
  const auto strided = torch::randn({64, 48}, kF64).t();
  EXPECT_LT(max_abs_diff(ops::gelu(strided), gelu_formula(strided)), 1e-12);
}

TEST(OpsGelu, GradientMatchesFiniteDifferences) {
  const auto x = torch::randn({7, 13}, kF64).requires_grad_();
  const auto w = torch::randn({7, 13}, kF64);
  expect_gradients_match([&] { return (ops::gelu(x) * w).sum(); }, {x}, {"x"});
}

TEST(OpsLayerNorm, MatchesFormula) {
  for (int64_t rows : kRows) {
    const auto x = torch::randn({rows, 96}, kF64) * 2 + 0.5;
    const auto w = torch::randn({96}, kF64), b = torch::randn({96}, kF64);
    EXPECT_LT(max_abs_diff(ops::layer_norm(x, w, b), layer_norm_formula(x, w, b, 1e-5)), 1e-12);
  }
  const auto strided = torch::randn({96, 3, 5}, kF64).permute({2, 1, 0});  // (5, 3, 96), strided
  const auto w = torch::randn({96}, kF64), b = torch::randn({96}, kF64);
  EXPECT_LT(max_abs_diff(ops::layer_norm(strided, w, b, 1e-3), layer_norm_formula(strided, w, b, 1e-3)), 1e-12);
}

TEST(OpsLayerNorm, GradientMatchesFiniteDifferences) {
  const auto x = torch::randn({5, 24}, kF64).requires_grad_();
  const auto w = torch::randn({24}, kF64).requires_grad_();
  const auto b = torch::randn({24}, kF64).requires_grad_();
  const auto r = torch::randn({5, 24}, kF64);
  expect_gradients_match([&] { return (ops::layer_norm(x, w, b) * r).sum(); }, {x, w, b}, {"x", "weight", "bias"});
}

TEST(OpsLayerNorm, RejectsMismatchedWeight) {
  const auto x = torch::randn({4, 8}, kF64);
  EXPECT_THROW(ops::layer_norm(x, torch::ones({7}, kF64), torch::zeros({8}, kF64)), llmtrain::Error);
  EXPECT_THROW(ops::layer_norm(x, torch::ones({8}, kF64), torch::zeros({9}, kF64)), llmtrain::Error);
}

TEST(OpsLayerNorm, AddLayerNormIsTheSumAndItsNorm) {
  const auto x = torch::randn({3, 7, 24}, kF64).requires_grad_(), d = torch::randn({3, 7, 24}, kF64).requires_grad_();
  const auto w = torch::randn({24}, kF64).requires_grad_(), b = torch::randn({24}, kF64).requires_grad_();
  const auto [h, y] = ops::add_layer_norm(x, d, w, b);
  EXPECT_LT(max_abs_diff(h, x + d), 1e-15);
  EXPECT_LT(max_abs_diff(y, layer_norm_formula(x + d, w, b, 1e-5)), 1e-12);
  // Both outputs carry gradient: h goes on down the residual stream, y into the next layer.
  const auto rh = torch::randn({3, 7, 24}, kF64), ry = torch::randn({3, 7, 24}, kF64);
  expect_gradients_match(
      [&] {
        const auto [h2, y2] = ops::add_layer_norm(x, d, w, b);
        return (h2 * rh).sum() + (y2 * ry).sum();
      },
      {x, d, w, b}, {"x", "delta", "weight", "bias"});
  const auto [same, y0] = ops::add_layer_norm(x, torch::Tensor(), w, b);  // no delta: h is x itself
  EXPECT_TRUE(same.is_same(x));
  EXPECT_LT(max_abs_diff(y0, ops::layer_norm(x, w, b)), 1e-15);
  llmtrain::testing::expect_error([&] { ops::add_layer_norm(x, d.narrow(1, 0, 3), w, b); },
                                  {"delta must have the shape of x"});
}

TEST(OpsEmbedding, IsTheTokenRowPlusThePositionRow) {
  const auto wte = torch::randn({11, 6}, kF64).requires_grad_(), wpe = torch::randn({9, 6}, kF64).requires_grad_();
  const auto idx = torch::randint(10, {3, 5}, torch::kLong);
  ops::IdCheck ids("test");
  const auto x = ops::embedding(idx, wte, wpe, 10, ids);
  ASSERT_EQ(x.sizes(), (std::vector<int64_t>{3, 5, 6}));
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t t = 0; t < 5; ++t)
      EXPECT_LT(max_abs_diff(x[b][t], wte[idx[b][t].item<int64_t>()] + wpe[t]), 1e-15) << b << ", " << t;
  const auto r = torch::randn({3, 5, 6}, kF64);
  expect_gradients_match([&] { return (ops::embedding(idx, wte, wpe, 10, ids) * r).sum(); }, {wte, wpe},
                         {"wte", "wpe"});
  // Row 10 exists (a padded vocabulary) but is no id; the CPU check throws at once, naming the place.
  auto bad = idx.clone();
  bad[2][3] = 10;
  llmtrain::testing::expect_error([&] { ops::embedding(bad, wte, wpe, 10, ids); },
                                  {"test: idx holds token id 10 at (2, 3)", "[0, 10)"});
  auto targets = idx.clone();
  targets[1][0] = -100;
  ids.check(targets, "targets", 10, -100);  // ignored ids pass
  targets[0][4] = -1;
  llmtrain::testing::expect_error([&] { ids.check(targets, "targets", 10, -100); },
                                  {"targets holds token id -1 at (0, 4)", "(or -100 to ignore)"});
  llmtrain::testing::expect_error([&] { ops::embedding(idx, wte, wpe.narrow(0, 0, 4), 10, ids); },
                                  {"sequence length 5", "4 positions"});
}

TEST(OpsEmbedding, StartOffsetsEachRowsPositions) {
  const auto wte = torch::randn({11, 6}, kF64), wpe = torch::randn({9, 6}, kF64);
  const auto idx = torch::randint(10, {3, 2}, torch::kLong);
  const auto start = torch::tensor({0, 4, 7}, torch::kLong);
  ops::IdCheck ids("test");
  const auto x = ops::embedding(idx, wte, wpe, 10, ids, start);
  for (int64_t b = 0; b < 3; ++b)
    for (int64_t t = 0; t < 2; ++t)
      EXPECT_LT(max_abs_diff(x[b][t], wte[idx[b][t].item<int64_t>()] + wpe[start[b].item<int64_t>() + t]), 1e-15);
  llmtrain::testing::expect_error(
      [&] {
        ops::embedding(idx, wte, wpe, 10, ids, torch::tensor({0, 4, 8}));
      },
      {"start puts positions outside wpe's [0, 9)"});
  llmtrain::testing::expect_error(
      [&] {
        ops::embedding(idx, wte, wpe, 10, ids, torch::tensor({0, 4}));
      },
      {"start must be (3) or [3, 2]"});
  const auto trainable = wte.clone().requires_grad_();
  llmtrain::testing::expect_error([&] { ops::embedding(idx, trainable, wpe, 10, ids, start); }, {"no backward"});
}

// Packed documents: every token's position given, (B, T), with a backward into wte and wpe.
TEST(OpsEmbedding, PositionsOfEveryToken) {
  const auto wte = torch::randn({11, 6}, kF64).requires_grad_(), wpe = torch::randn({9, 6}, kF64).requires_grad_();
  const auto idx = torch::randint(10, {2, 5}, torch::kLong);
  const auto pos = torch::tensor({0, 1, 2, 0, 1, 0, 0, 1, 2, 3}, torch::kLong).view({2, 5});
  ops::IdCheck ids("test");
  const auto x = ops::embedding(idx, wte, wpe, 10, ids, pos);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 5; ++t)
      EXPECT_LT(max_abs_diff(x[b][t], wte[idx[b][t].item<int64_t>()] + wpe[pos[b][t].item<int64_t>()]), 1e-15);
  const auto r = torch::randn({2, 5, 6}, kF64);
  expect_gradients_match([&] { return (ops::embedding(idx, wte, wpe, 10, ids, pos) * r).sum(); }, {wte, wpe},
                         {"wte", "wpe"});
  llmtrain::testing::expect_error([&] { ops::embedding(idx, wte, wpe, 10, ids, pos + 6); },
                                  {"start puts positions outside wpe's [0, 9)"});
}

TEST(OpsMlp, IsItsFormula) {
  const auto x = torch::randn({3, 5, 16}, kF64).requires_grad_();
  const auto fw = (0.3 * torch::randn({24, 16}, kF64)).requires_grad_(), fb = torch::randn({24}, kF64).requires_grad_();
  const auto pw = (0.3 * torch::randn({16, 24}, kF64)).requires_grad_(), pb = torch::randn({16}, kF64).requires_grad_();
  const auto want = torch::matmul(gelu_formula(torch::matmul(x, fw.t()) + fb), pw.t()) + pb;
  EXPECT_LT(max_abs_diff(ops::mlp(x, fw, fb, pw, pb), want), 1e-12);
  const auto r = torch::randn({3, 5, 16}, kF64);
  expect_gradients_match([&] { return (ops::mlp(x, fw, fb, pw, pb) * r).sum(); }, {x, fw, fb, pw, pb},
                         {"x", "fc weight", "fc bias", "proj weight", "proj bias"});
  llmtrain::testing::expect_error([&] { ops::mlp(x, fw.t(), fb, pw, pb); }, {"mlp: fc: weight must be (out, 16)"});
  llmtrain::testing::expect_error([&] { ops::mlp(x, fw, fb, pw, fb); }, {"mlp: proj: bias must be (16)"});
}

TEST(OpsLinear, IsItsFormulaAndNamesBadShapes) {
  const auto x = torch::randn({3, 5, 16}, kF64).requires_grad_();
  const auto w = (0.3 * torch::randn({24, 16}, kF64)).requires_grad_(), b = torch::randn({24}, kF64).requires_grad_();
  EXPECT_LT(max_abs_diff(ops::linear(x, w, b), torch::matmul(x, w.t()) + b), 1e-12);
  EXPECT_LT(max_abs_diff(ops::linear(x, w), torch::matmul(x, w.t())), 1e-12);
  const auto r = torch::randn({3, 5, 24}, kF64);
  expect_gradients_match([&] { return (ops::linear(x, w, b) * r).sum(); }, {x, w, b}, {"x", "weight", "bias"});
  llmtrain::testing::expect_error([&] { ops::linear(x, w.t(), b); }, {"linear: weight must be (out, 16)", "[16, 24]"});
  llmtrain::testing::expect_error([&] { ops::linear(x, w, b.narrow(0, 0, 5)); }, {"linear: bias must be (24)"});
}

TEST(OpsNormLinear, IsTheSumItsNormAndTheLayerAndNamesBadInput) {
  torch::NoGradGuard no_grad;
  const auto x = torch::randn({3, 1, 16}, kF64), d = torch::randn({3, 1, 16}, kF64);
  const auto g = 1 + 0.1 * torch::randn({16}, kF64), c = 0.1 * torch::randn({16}, kF64);
  const auto w = 0.3 * torch::randn({24, 16}, kF64), b = torch::randn({24}, kF64);
  const auto h = x + d;
  const auto n = (h - h.mean(-1, true)) / (h.var(-1, false, true) + 1e-5).sqrt() * g + c;
  const auto y = torch::matmul(n, w.t()) + b;
  const auto [h1, y1] = ops::norm_linear(x, d, g, c, 1e-5, w, b, /*gelu=*/false);
  EXPECT_LT(max_abs_diff(h1, h), 1e-12);
  EXPECT_LT(max_abs_diff(y1, y), 1e-12);
  const auto [h2, y2] = ops::norm_linear(x, {}, g, c, 1e-5, w, {}, /*gelu=*/true);  // no delta, no bias
  EXPECT_TRUE(h2.is_same(x));
  const auto n2 = (x - x.mean(-1, true)) / (x.var(-1, false, true) + 1e-5).sqrt() * g + c;
  EXPECT_LT(max_abs_diff(y2, torch::gelu(torch::matmul(n2, w.t()), "tanh")), 1e-12);
  llmtrain::testing::expect_error([&] { ops::norm_linear(x, d, g, c, 1e-5, w.t(), b, false); },
                                  {"norm_linear: weight must be (out, 16)"});
  llmtrain::testing::expect_error([&] { ops::norm_linear(x, d, g.narrow(0, 0, 8), c, 1e-5, w, b, false); },
                                  {"layer_norm: weight must be (16)"});
  torch::GradMode::set_enabled(true);
  const auto wg = w.clone().requires_grad_();
  llmtrain::testing::expect_error([&] { ops::norm_linear(x, d, g, c, 1e-5, wg, b, false); },
                                  {"norm_linear has no backward"});
  torch::GradMode::set_enabled(false);
}

TEST(OpsDispatch, OneOpsKernelTurnsOffByName) {
  EXPECT_FALSE(ops::cuda_kernel_enabled("mlp"));                            // off at start: slower than ATen's products
  EXPECT_EQ(ops::cuda_kernel_enabled("fp8"), ops::cuda_kernels_enabled());  // on: tested on a GPU
  EXPECT_FALSE(ops::cuda_kernel_enabled("attention"));                      // off at start: slower than cuDNN's
  EXPECT_FALSE(ops::cuda_kernel_enabled("attention_fp8"));                  // off unless asked: it changes the numbers
  ops::set_cuda_kernel_enabled("mlp", true);
  EXPECT_EQ(ops::cuda_kernel_enabled("mlp"), ops::cuda_kernels_enabled());
  ops::set_cuda_kernel_enabled("gelu", false);
  EXPECT_FALSE(ops::cuda_kernel_enabled("gelu"));
  EXPECT_EQ(ops::cuda_kernel_enabled("layer_norm"), ops::cuda_kernels_enabled());
  ops::set_cuda_kernel_enabled("gelu", true);
  ops::set_cuda_kernel_enabled("mlp", false);
  EXPECT_EQ(ops::cuda_kernel_names().size(), 16u);
  llmtrain::testing::expect_error([] { ops::set_cuda_kernel_enabled("softmax", false); },
                                  {"\"softmax\"", "layer_norm", "cross_entropy"});
}

TEST(OpsCrossEntropy, MatchesFormulaWithIgnoredTargets) {
  for (int64_t rows : kRows) {
    const int64_t V = 53;
    const auto logits = 4 * torch::randn({rows, V}, kF64);
    auto targets = torch::randint(V, {rows}, torch::kLong);
    if (rows > 1) targets.index_put_({torch::indexing::Slice(0, rows / 2)}, ops::kIgnoreIndex);
    const auto keep = targets.ne(ops::kIgnoreIndex);
    const auto nll = torch::logsumexp(logits, -1) - logits.gather(1, targets.clamp_min(0).unsqueeze(1)).squeeze(1);
    const double expected = nll.masked_select(keep).mean().item<double>();
    EXPECT_NEAR(ops::cross_entropy(logits, targets).item<double>(), expected, 1e-12) << rows << " rows";
  }
}

TEST(OpsCrossEntropy, StridedRowsAndReducedPrecisionLogits) {
  const auto padded = torch::randn({9, 64}, kF64);
  const auto logits = padded.narrow(1, 0, 50);  // rows strided like the model's unpadded logits
  const auto targets = torch::randint(50, {9}, torch::kLong);
  const double ref = ops::cross_entropy(logits.contiguous(), targets).item<double>();
  EXPECT_NEAR(ops::cross_entropy(logits, targets).item<double>(), ref, 1e-12);

  const auto loss_bf16 = ops::cross_entropy(logits.to(torch::kBFloat16), targets);
  EXPECT_EQ(loss_bf16.scalar_type(), torch::kFloat);  // reduced in float32
  EXPECT_NEAR(loss_bf16.item<double>(), ref, 2e-2 * std::abs(ref));
}

TEST(OpsCrossEntropy, GradientMatchesFiniteDifferences) {
  const auto logits = torch::randn({6, 11}, kF64).requires_grad_();
  auto targets = torch::randint(11, {6}, torch::kLong);
  targets[2] = ops::kIgnoreIndex;
  expect_gradients_match([&] { return ops::cross_entropy(logits, targets); }, {logits}, {"logits"});
}

TEST(OpsCrossEntropy, PaddingColumnsAreNoClassesAndGetNoGradient) {
  const auto padded = torch::randn({5, 16}, kF64).requires_grad_();
  const auto targets = torch::randint(13, {5}, torch::kLong);
  const auto loss = ops::cross_entropy(padded, targets, ops::kIgnoreIndex, 13);
  EXPECT_NEAR(loss.item<double>(), ops::cross_entropy(padded.narrow(1, 0, 13).contiguous(), targets).item<double>(),
              1e-12);
  loss.backward();
  EXPECT_TRUE(torch::equal(padded.grad().narrow(1, 13, 3), torch::zeros({5, 3}, kF64)));
  EXPECT_THROW(ops::cross_entropy(padded, targets, ops::kIgnoreIndex, 17), llmtrain::Error);
}

TEST(OpsCrossEntropy, RejectsBadShapes) {
  EXPECT_THROW(ops::cross_entropy(torch::randn({4, 5, 6}), torch::zeros({4}, torch::kLong)), llmtrain::Error);
  EXPECT_THROW(ops::cross_entropy(torch::randn({4, 5}), torch::zeros({3}, torch::kLong)), llmtrain::Error);
  EXPECT_THROW(ops::cross_entropy(torch::randn({4, 5}), torch::zeros({4}, torch::kInt)), llmtrain::Error);
}

TEST(OpsLinearCrossEntropy, MatchesTheLogitsPathInChunks) {
  const int64_t N = 30, C = 12, V = 17, classes = 15;  // two padding rows in the head
  const auto w = torch::randn({V, C}, kF64);
  auto targets = torch::randint(classes, {N}, torch::kLong);
  targets.index_put_({torch::indexing::Slice(3, 9)}, ops::kIgnoreIndex);
  const auto h0 = torch::randn({N, C}, kF64);
  const auto h_ref = h0.clone().requires_grad_();
  const auto ref = ops::cross_entropy(h_ref.mm(w.t()), targets, ops::kIgnoreIndex, classes);
  (1.5 * ref).backward();
  for (const int64_t chunk : {int64_t(7), N, int64_t(0)}) {  // several chunks with a short last one, one, automatic
    SCOPED_TRACE(testing::Message() << "chunk_rows " << chunk);
    const auto h = h0.clone().requires_grad_();
    const auto loss = ops::linear_cross_entropy(h, w, targets, ops::kIgnoreIndex, classes, chunk);
    EXPECT_NEAR(loss.item<double>(), ref.item<double>(), 1e-12);
    (1.5 * loss).backward();
    EXPECT_LT(max_abs_diff(h.grad(), h_ref.grad()), 1e-12);
  }
  {  // no grad mode: the loss alone, even for a head that requires grad elsewhere
    torch::NoGradGuard no_grad;
    EXPECT_NEAR(ops::linear_cross_entropy(h0, w.clone().requires_grad_(), targets, ops::kIgnoreIndex, classes, 4)
                    .item<double>(),
                ref.item<double>(), 1e-12);
  }
  EXPECT_TRUE(std::isnan(  // every target ignored: NaN, as cross_entropy gives
      ops::linear_cross_entropy(h0, w, torch::full({N}, ops::kIgnoreIndex, torch::kLong)).item<double>()));
}

TEST(OpsLinearCrossEntropy, RejectsATrainableHeadAndBadInput) {
  const auto h = torch::randn({4, 6}), w = torch::randn({9, 6});
  const auto targets = torch::randint(9, {4}, torch::kLong);
  llmtrain::testing::expect_error([&] { ops::linear_cross_entropy(h, w.clone().requires_grad_(), targets); },
                                  {"requires grad", "cross_entropy"});
  llmtrain::testing::expect_error(
      [&] {
        ops::linear_cross_entropy(h, torch::randn({9, 5}), targets);
      },
      {"[4, 6]", "[9, 5]"});
  llmtrain::testing::expect_error([&] { ops::linear_cross_entropy(h, w, targets.narrow(0, 0, 3)); }, {"(4)"});
  llmtrain::testing::expect_error([&] { ops::linear_cross_entropy(h, w, targets, ops::kIgnoreIndex, 10); },
                                  {"num_classes 10", "[1, 9]"});
  llmtrain::testing::expect_error(
      [&] { ops::linear_cross_entropy(h, w, torch::full({4}, 9, torch::kLong), ops::kIgnoreIndex, 9); },
      {"outside [0, 9)"});
  llmtrain::testing::expect_error([&] { ops::linear_cross_entropy(h.to(torch::kDouble), w, targets); }, {"dtype"});
}

TEST(OpsAttention, MatchesCausalSoftmaxFormula) {
  for (int64_t T : {1, 7, 113}) {
    const auto q = torch::randn({2, 3, T, 16}, kF64), k = torch::randn({2, 3, T, 16}, kF64);
    const auto v = torch::randn({2, 3, T, 16}, kF64);
    EXPECT_LT(max_abs_diff(ops::attention(q, k, v), attention_formula(q, k, v)), 1e-12) << "T=" << T;
  }
  // Heads split out of a (B, T, C) projection are strided, as in CausalSelfAttention.
  const auto qkv = torch::randn({2, 9, 3 * 32}, kF64).split(32, -1);
  const auto heads = [](const torch::Tensor& t) { return t.view({2, 9, 4, 8}).transpose(1, 2); };
  const auto q = heads(qkv[0]), k = heads(qkv[1]), v = heads(qkv[2]);
  EXPECT_LT(max_abs_diff(ops::attention(q, k, v), attention_formula(q, k, v)), 1e-12);
}

TEST(OpsAttention, GradientMatchesFiniteDifferences) {
  const auto q = torch::randn({1, 2, 5, 4}, kF64).requires_grad_();
  const auto k = torch::randn({1, 2, 5, 4}, kF64).requires_grad_();
  const auto v = torch::randn({1, 2, 5, 4}, kF64).requires_grad_();
  const auto r = torch::randn({1, 2, 5, 4}, kF64);
  expect_gradients_match([&] { return (ops::attention(q, k, v) * r).sum(); }, {q, k, v}, {"q", "k", "v"});
}

// Windows of packed documents: a query attends to the keys of its own document up to itself, exactly
// as that document alone would.
TEST(OpsAttention, DocumentMaskKeepsEachDocumentToItself) {
  const auto pos = torch::tensor({0, 1, 2, 0, 1, 0, 1, 2, 3, 0}, torch::kLong).view({1, 10});
  const auto mask = ops::document_mask(pos);
  ASSERT_EQ(mask.sizes(), (std::vector<int64_t>{1, 1, 10, 10}));
  const std::vector<int64_t> doc = {0, 0, 0, 1, 1, 2, 2, 2, 2, 3};
  for (int64_t t = 0; t < 10; ++t)
    for (int64_t s = 0; s < 10; ++s)
      EXPECT_EQ(mask[0][0][t][s].item<bool>(), s <= t && doc[size_t(s)] == doc[size_t(t)]) << t << ", " << s;
  const auto q = torch::randn({1, 2, 10, 4}, kF64).requires_grad_(),
             k = torch::randn({1, 2, 10, 4}, kF64).requires_grad_();
  const auto v = torch::randn({1, 2, 10, 4}, kF64).requires_grad_();
  const auto y = ops::attention(q, k, v, 0.0, mask);
  for (const auto& [at, n] : std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {3, 2}, {5, 4}, {9, 1}}) {
    const auto part = [&](const torch::Tensor& t) { return t.narrow(2, at, n); };
    EXPECT_LT(max_abs_diff(y.narrow(2, at, n), attention_formula(part(q), part(k), part(v))), 1e-12) << at;
  }
  const auto r = torch::randn({1, 2, 10, 4}, kF64);
  expect_gradients_match([&] { return (ops::attention(q, k, v, 0.0, mask) * r).sum(); }, {q, k, v}, {"q", "k", "v"});
  llmtrain::testing::expect_error([&] { ops::attention(q, k, v, 0.0, mask.to(torch::kFloat)); },
                                  {"mask must be (1, 1, 10, 10) bool"});
}

// Grouped-query attention: KV heads of keys and values, each serving H / KV query heads in a row, as
// transformers' repeat_kv lays them out; causal and document-masked, with their gradients.
TEST(OpsAttention, GroupedHeadsAreTheRepeatedHeads) {
  const auto q = torch::randn({2, 6, 9, 4}, kF64).requires_grad_();
  const auto k = torch::randn({2, 2, 9, 4}, kF64).requires_grad_(),
             v = torch::randn({2, 2, 9, 4}, kF64).requires_grad_();
  const auto rep = [](const torch::Tensor& t) { return t.repeat_interleave(3, 1); };
  EXPECT_LT(max_abs_diff(ops::attention(q, k, v), attention_formula(q, rep(k), rep(v))), 1e-12);
  const auto mask =
      ops::document_mask(torch::tensor({0, 1, 2, 0, 1, 2, 3, 0, 1}, torch::kLong).view({1, 9}).expand({2, 9}));
  EXPECT_LT(max_abs_diff(ops::attention(q, k, v, 0.0, mask), ops::attention(q, rep(k), rep(v), 0.0, mask)), 1e-12);
  const auto r = torch::randn({2, 6, 9, 4}, kF64);
  expect_gradients_match([&] { return (ops::attention(q, k, v) * r).sum(); }, {q, k, v}, {"q", "k", "v"});
  expect_gradients_match([&] { return (ops::attention(q, k, v, 0.0, mask) * r).sum(); }, {q, k, v}, {"q", "k", "v"});
  llmtrain::testing::expect_error(
      [&] {
        ops::attention(q, torch::randn({2, 4, 9, 4}, kF64), v);
      },
      {"KV dividing q's 6 heads", "[2, 4, 9, 4]"});
}

TEST(OpsAttention, RejectsBadShapes) {
  const auto q = torch::randn({1, 2, 5, 4});
  EXPECT_THROW(ops::attention(q.flatten(0, 1), q.flatten(0, 1), q.flatten(0, 1)), llmtrain::Error);
  EXPECT_THROW(ops::attention(q, torch::randn({1, 2, 6, 4}), q), llmtrain::Error);
  EXPECT_THROW(ops::attention(q, q, q, 1.0), llmtrain::Error);
}

TEST(OpsDecodeAttention, AppendsToTheCacheAndAttendsToTheRowsPrefix) {
  const int64_t B = 3, H = 2, S = 10, D = 4, C = H * D;
  const auto qkv = torch::randn({B, 3 * C}, kF64);
  const auto k0 = torch::randn({B, H, S, D}, kF64), v0 = torch::randn({B, H, S, D}, kF64);
  auto kc = k0.clone(), vc = v0.clone();
  const std::vector<int64_t> pos = {0, 5, 9};
  const auto y = ops::decode_attention(qkv, kc, vc, torch::tensor(pos, torch::kLong));
  ASSERT_EQ(y.sizes(), (std::vector<int64_t>{B, C}));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t p = pos[size_t(b)];
    for (int64_t h = 0; h < H; ++h) {
      const auto head = [&](int64_t part) { return qkv[b].narrow(0, part * C + h * D, D); };
      auto want_k = k0[b][h].clone(), want_v = v0[b][h].clone();
      want_k[p] = head(1);
      want_v[p] = head(2);
      EXPECT_TRUE(torch::equal(kc[b][h], want_k)) << b << ", " << h;  // only position p written
      EXPECT_TRUE(torch::equal(vc[b][h], want_v)) << b << ", " << h;
      const auto w = torch::softmax(torch::mv(want_k.narrow(0, 0, p + 1), head(0)) / std::sqrt(double(D)), 0);
      EXPECT_LT(max_abs_diff(y[b].narrow(0, h * D, D), torch::mv(want_v.narrow(0, 0, p + 1).t(), w)), 1e-12);
    }
  }
  llmtrain::testing::expect_error(
      [&] {
        ops::decode_attention(qkv, kc, vc, torch::tensor({0, 10, 2}));
      },
      {"positions must lie in [0, 10)", "[0, 10]"});
  llmtrain::testing::expect_error([&] { ops::decode_attention(qkv.narrow(1, 0, C), kc, vc, torch::tensor(pos)); },
                                  {"qkv must be (3, (H + 2 x 2) x 4)"});
  llmtrain::testing::expect_error([&] { ops::decode_attention(qkv.to(torch::kFloat), kc, vc, torch::tensor(pos)); },
                                  {"must share a dtype"});
  const auto trainable = qkv.clone().requires_grad_();
  llmtrain::testing::expect_error([&] { ops::decode_attention(trainable, kc, vc, torch::tensor(pos)); },
                                  {"no backward"});
}

TEST(OpsDecodeAttention, GroupedHeadsReadTheirSharedKeysWithinTheWindow) {
  // Six query heads over two key/value heads (three queries each), a window of 3 positions.
  const int64_t B = 2, H = 6, KV = 2, S = 9, D = 4, W = 3;
  const auto qkv = torch::randn({B, (H + 2 * KV) * D}, kF64);
  const auto k0 = torch::randn({B, KV, S, D}, kF64), v0 = torch::randn({B, KV, S, D}, kF64);
  for (const int64_t window : {int64_t(0), W}) {
    auto kc = k0.clone(), vc = v0.clone();
    const std::vector<int64_t> pos = {1, 7};
    const auto y = ops::decode_attention(qkv, kc, vc, torch::tensor(pos, torch::kLong), window);
    ASSERT_EQ(y.sizes(), (std::vector<int64_t>{B, H * D}));
    for (int64_t b = 0; b < B; ++b) {
      const int64_t p = pos[size_t(b)], lo = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
      for (int64_t h = 0; h < H; ++h) {
        const int64_t g = h / (H / KV);
        auto want_k = k0[b][g].clone(), want_v = v0[b][g].clone();
        want_k[p] = qkv[b].narrow(0, (H + g) * D, D);
        want_v[p] = qkv[b].narrow(0, (H + KV + g) * D, D);
        EXPECT_TRUE(torch::equal(kc[b][g], want_k)) << b << ", " << g;
        EXPECT_TRUE(torch::equal(vc[b][g], want_v)) << b << ", " << g;
        const auto q = qkv[b].narrow(0, h * D, D);
        const auto w = torch::softmax(torch::mv(want_k.narrow(0, lo, p + 1 - lo), q) / std::sqrt(double(D)), 0);
        EXPECT_LT(max_abs_diff(y[b].narrow(0, h * D, D), torch::mv(want_v.narrow(0, lo, p + 1 - lo).t(), w)), 1e-12)
            << "window " << window << " row " << b << " head " << h;
      }
    }
  }
  auto kc = k0.clone(), vc = v0.clone();
  llmtrain::testing::expect_error(
      [&] {
        ops::decode_attention(qkv.narrow(1, 0, 5 * D), kc, vc, torch::tensor({0, 1}));
      },
      {"H a multiple of the caches' 2 heads"});
  llmtrain::testing::expect_error(
      [&] {
        ops::decode_attention(qkv, kc, vc, torch::tensor({0, 1}), -1);
      },
      {"window must be >= 0"});
}

TEST(OpsAdamW, ReferenceStepEqualsLibTorchAdamW) {
  // Three steps of ops::adamw_step (no clipping, no loss scale) against torch::optim::AdamW.
  std::vector<torch::Tensor> ours, grads, m, v;
  std::vector<double> wd;
  std::vector<torch::Tensor> theirs;
  for (int64_t n : {1, 7, 113}) {
    ours.push_back(torch::randn({n}));
    theirs.push_back(ours.back().clone().requires_grad_());
    grads.push_back(torch::randn({n}));
    m.push_back(torch::zeros({n}));
    v.push_back(torch::zeros({n}));
    wd.push_back(n == 7 ? 0.0 : 0.1);
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<torch::Tensor>{theirs[0], theirs[2]},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).weight_decay(0.1)));
  groups.emplace_back(std::vector<torch::Tensor>{theirs[1]},
                      std::make_unique<torch::optim::AdamWOptions>(
                          torch::optim::AdamWOptions(1e-2).betas({0.9, 0.95}).weight_decay(0.0)));
  torch::optim::AdamW adamw(groups);
  ops::AdamWHyper h;
  h.lr = 1e-2;
  h.beta2 = 0.95;
  for (int64_t s = 1; s <= 3; ++s) {
    h.step = s;
    ops::adamw_step(ours, grads, m, v, {}, wd, h, ops::grad_norm_scale(grads, 1.0, 0.0));
    for (size_t i = 0; i < theirs.size(); ++i) theirs[i].mutable_grad() = grads[i].clone();
    adamw.step();
  }
  for (size_t i = 0; i < ours.size(); ++i) EXPECT_TRUE(torch::allclose(ours[i], theirs[i].detach(), 1e-6, 1e-7)) << i;
}

TEST(OpsAdamW, StochasticRoundingIsUnbiasedAndDependsOnSeedStepAndTensor) {
  // lr 0 leaves the masters as they are, so the bf16 copies show the rounding alone. 1 + 2^-10 lies an
  // eighth of a bf16 step (2^-7) above 1: rounded to nearest it is 1, stochastically 1 + 2^-7 one time
  // in eight, so the copies' mean is the master's.
  constexpr int64_t n = 1 << 17;
  const float x = 1.0f + std::ldexp(1.0f, -10), up = 1.0f + std::ldexp(1.0f, -7);
  const auto masters = [&] { return std::vector<torch::Tensor>{torch::full({n}, x), torch::full({n}, -x)}; };
  const auto copies = [&](uint64_t seed, int64_t step, bool stochastic) {
    auto w = masters();
    std::vector<torch::Tensor> g = {torch::ones({n}), torch::ones({n})};
    std::vector<torch::Tensor> m = {torch::zeros({n}), torch::zeros({n})}, v = {torch::zeros({n}), torch::zeros({n})};
    std::vector<torch::Tensor> p = {torch::zeros({n}, torch::kBFloat16), torch::zeros({n}, torch::kBFloat16)};
    ops::AdamWHyper h;
    h.step = step;
    h.stochastic_rounding = stochastic;
    h.round_seed = seed;
    ops::adamw_step(w, g, m, v, p, {0.0, 0.0}, h, ops::grad_norm_scale(g, 1.0, 0.0));
    EXPECT_TRUE(torch::equal(w[0], masters()[0]));
    return p;
  };
  const auto nearest = copies(1, 1, false);
  EXPECT_TRUE(torch::equal(nearest[0], torch::ones({n}, torch::kBFloat16)));
  const auto a = copies(1, 1, true);
  for (int sign : {1, -1}) {
    const auto got = a[sign == 1 ? 0 : 1].to(torch::kFloat) * sign;
    EXPECT_TRUE(((got == 1.0f) | (got == up)).all().item<bool>()) << "only the two neighbours, sign " << sign;
    // The mean's standard error is 2^-7 * sqrt(7/64 / n) = 9e-6.
    EXPECT_NEAR(got.mean().item<double>(), double(x), 5e-5) << "sign " << sign;
  }
  EXPECT_FALSE(torch::equal(a[0], -a[1])) << "each tensor draws its own bits";
  EXPECT_TRUE(torch::equal(copies(1, 1, true)[0], a[0])) << "the same seed and step round alike";
  EXPECT_FALSE(torch::equal(copies(1, 2, true)[0], a[0])) << "another step draws other bits";
  EXPECT_FALSE(torch::equal(copies(2, 1, true)[0], a[0])) << "another seed draws other bits";
  {  // The ATen reference draws kernels::bf16_bits_stochastic's bits (which the CUDA kernel runs).
    std::vector<torch::Tensor> w = {torch::randn({4099}) * 1e3}, g = {torch::zeros({4099})};
    std::vector<torch::Tensor> m = {torch::zeros({4099})}, v = {torch::zeros({4099})};
    std::vector<torch::Tensor> p = {torch::zeros({4099}, torch::kBFloat16)};
    ops::AdamWHyper h;
    h.step = 7;
    h.stochastic_rounding = true;
    h.round_seed = 1234567;
    ops::adamw_step(w, g, m, v, p, {0.0}, h, ops::grad_norm_scale(g, 1.0, 0.0));
    const auto* bits = reinterpret_cast<const uint16_t*>(p[0].data_ptr());
    int64_t same = 0;
    for (int64_t i = 0; i < 4099; ++i)
      same += bits[i] == llmtrain::kernels::bf16_bits_stochastic(w[0][i].item<float>(), ops::round_key(h, 0), i);
    EXPECT_EQ(same, 4099);
  }
  // Non-finite masters keep their value.
  std::vector<torch::Tensor> w = {torch::tensor({INFINITY, -INFINITY, NAN, 3.0f})}, g = {torch::zeros({4})};
  std::vector<torch::Tensor> m = {torch::zeros({4})}, v = {torch::zeros({4})},
                             p = {torch::zeros({4}, torch::kBFloat16)};
  ops::AdamWHyper h;
  h.stochastic_rounding = true;
  ops::adamw_step(w, g, m, v, p, {0.0}, h, ops::grad_norm_scale(g, 1.0, 0.0));
  const auto pf = p[0].to(torch::kFloat);
  EXPECT_EQ(pf[0].item<float>(), INFINITY);
  EXPECT_EQ(pf[1].item<float>(), -INFINITY);
  EXPECT_TRUE(std::isnan(pf[2].item<float>()));
  EXPECT_EQ(pf[3].item<float>(), 3.0f);
}

TEST(OpsAdamW, NormScaleClipsAndBadInputNamesTheTensor) {
  const std::vector<torch::Tensor> grads = {torch::full({3, 4}, 2.0f), torch::full({3}, 2.0f)};  // norm sqrt(60)
  const auto ns = ops::grad_norm_scale(grads, 0.5, 1.0);
  EXPECT_NEAR(ns[0].item<double>(), 0.5 * std::sqrt(60.0), 1e-5);
  EXPECT_NEAR(ns[1].item<double>(), 0.5 / (0.5 * std::sqrt(60.0) + 1e-6), 1e-6);
  EXPECT_NEAR(ops::grad_norm_scale(grads, 1.0, 100.0)[1].item<double>(), 1.0, 0.0);  // under the limit
  EXPECT_TRUE(std::isnan(ops::grad_norm_scale({torch::tensor({1.0f, NAN})}, 1.0, 1.0)[1].item<double>()));
  llmtrain::testing::expect_error(
      [&] {
        ops::grad_norm_scale({grads[0], grads[1].to(torch::kDouble)}, 1.0, 1.0);
      },
      {"grads[1]", "Double"});
  std::vector<torch::Tensor> masters = {torch::zeros({3, 4}), torch::zeros({3})};
  std::vector<torch::Tensor> m = {torch::zeros({3, 4}), torch::zeros({4})};
  llmtrain::testing::expect_error(
      [&] {
        ops::adamw_step(masters, grads, m, masters, {}, {0.1, 0.0}, {}, ops::grad_norm_scale(grads, 1, 1));
      },
      {"exp_avgs[1]", "[3]"});
}
