// GPT2 on the CPU reference path: size, names, initial loss, causality, float64 gradients, fitting,
// agreement with Hugging Face transformers, and errors for bad configs and inputs.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/serialize.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <set>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/nn/gpt2.h"
#include "llmtrain/ops/dispatch.h"
#include "test_util.h"

using llmtrain::nn::GPT2;
using llmtrain::nn::GPT2Config;
using llmtrain::testing::expect_error;
using llmtrain::testing::expect_gradients_match;
using llmtrain::testing::max_abs_diff;
using llmtrain::testing::test_python;
using llmtrain::testing::test_source_dir;
using ::testing::HasSubstr;

namespace {

torch::Tensor random_tokens(int64_t B, int64_t T, int64_t vocab) { return torch::randint(vocab, {B, T}, torch::kLong); }

}  // namespace

TEST(GPT2, PresetSizesMatchHuggingFaceCounts) {
  EXPECT_EQ(GPT2(GPT2Config::preset("gpt2"))->num_parameters(), 124439808);
  // MFU counts 6 FLOPs per parameter per token plus attention: 6 N + 12 L C T.
  EXPECT_DOUBLE_EQ(GPT2(GPT2Config::preset("gpt2"))->flops_per_token(1024), 6.0 * 124439808 + 12.0 * 12 * 768 * 1024);
  const auto cfg = GPT2Config::preset("gpt2-xl");
  EXPECT_EQ(cfg.n_layer(), 48);
  EXPECT_EQ(cfg.n_head(), 25);
  EXPECT_EQ(cfg.n_embd(), 1600);
  EXPECT_EQ(GPT2Config::preset("gpt2-medium").n_embd(), 1024);
  EXPECT_EQ(GPT2Config::preset("gpt2-large").n_layer(), 36);
  expect_error([] { GPT2Config::preset("gpt3"); }, {"unknown preset \"gpt3\"", "gpt2-xl"});
}

TEST(GPT2, VocabularyIsPaddedInsideAndCutOutside) {
  const auto cfg = GPT2Config::preset("tiny");
  EXPECT_EQ(cfg.padded_vocab_size(), 50304);
  EXPECT_EQ(GPT2Config().vocab_size(100).padded_vocab_size(), 128);
  EXPECT_EQ(GPT2Config().vocab_size(256).padded_vocab_size(), 256);
  GPT2 model(cfg);
  EXPECT_EQ(model->transformer->wte->weight.size(0), 50304);
  const auto padded_rows = model->transformer->wte->weight.narrow(0, 50257, 50304 - 50257);
  EXPECT_EQ(padded_rows.abs().max().item<float>(), 0.0f);

  const auto idx = random_tokens(2, 16, cfg.vocab_size());
  const auto out = model(idx, idx);
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{2, 16, 50257}));
  out.loss.backward();
  EXPECT_EQ(model->transformer->wte->weight.grad().narrow(0, 50257, 47).abs().max().item<float>(), 0.0f);
}

TEST(GPT2, ParameterNamesAreHuggingFaces) {
  GPT2 model(GPT2Config::preset("tiny"));
  std::set<std::string> names;
  for (const auto& item : model->named_parameters()) names.insert(item.key());
  std::set<std::string> expected = {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight",
                                    "transformer.ln_f.bias"};
  for (int layer = 0; layer < 2; ++layer) {
    for (const char* leaf : {"ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj"}) {
      const std::string base = "transformer.h." + std::to_string(layer) + "." + leaf;
      expected.insert(base + ".weight");
      expected.insert(base + ".bias");
    }
  }
  EXPECT_EQ(names, expected);
}

TEST(GPT2, InitialisationFollowsGPT2) {
  GPT2 model(GPT2Config::preset("gpt2"));
  auto& block = *model->transformer->h->ptr(0)->as<llmtrain::nn::BlockImpl>();
  EXPECT_NEAR(block.attn->c_attn->weight.std().item<double>(), 0.02, 1e-3);
  EXPECT_NEAR(block.mlp->c_fc->weight.std().item<double>(), 0.02, 1e-3);
  EXPECT_NEAR(block.attn->c_proj->weight.std().item<double>(), 0.02 / std::sqrt(24.0), 2e-4);
  EXPECT_NEAR(block.mlp->c_proj->weight.std().item<double>(), 0.02 / std::sqrt(24.0), 2e-4);
  EXPECT_EQ(block.attn->c_attn->bias.abs().max().item<float>(), 0.0f);
  EXPECT_NEAR(model->transformer->wte->weight.narrow(0, 0, 50257).std().item<double>(), 0.02, 1e-3);
  EXPECT_EQ(block.ln_1->weight.min().item<float>(), 1.0f);
}

TEST(GPT2, InitialWeightsAreLlmcsDrawsForTheSeed) {
  // The expected values are torch.Generator().manual_seed(42) drawing Tensor.normal_ in llm.c's order
  // and sizes (wte's 100 x 16, wpe, then each layer's c_attn, attn.c_proj, c_fc, mlp.c_proj), made in
  // Python; the constructors' own draws before them must not shift them.
  torch::manual_seed(42);
  GPT2 model(GPT2Config().n_layer(2).n_head(2).n_embd(16).vocab_size(100).block_size(8));
  const auto& t = *model->transformer;
  const auto& last = *t.h->ptr(1)->as<llmtrain::nn::BlockImpl>();
  EXPECT_NEAR(t.wte->weight[0][0].item<double>(), 0.03853830322623253, 1e-7);
  EXPECT_NEAR(t.wte->weight[99][15].item<double>(), -0.02215675823390484, 1e-7);
  EXPECT_EQ(t.wte->weight.narrow(0, 100, 28).abs().max().item<float>(), 0.0f) << "padded rows";
  EXPECT_NEAR(t.wpe->weight[7][15].item<double>(), 0.013474449515342712, 1e-7);
  EXPECT_NEAR(t.h->ptr(0)->as<llmtrain::nn::BlockImpl>()->attn->c_attn->weight[47][0].item<double>(),
              0.008383676409721375, 1e-7);
  EXPECT_NEAR(last.mlp->c_proj->weight[15][63].item<double>(), -0.018375158309936523, 1e-7);
}

TEST(GPT2, LossAtInitialisationIsLogVocab) {
  torch::manual_seed(1);
  // Twelve random blocks widen the logits a little: 124M starts slightly above ln(V) (llm.c's
  // reference run reads 11.02 at step 0), so it gets a looser bound than the tiny model.
  for (const auto& [preset, tolerance] : {std::pair{"tiny", 0.1}, std::pair{"gpt2", 0.2}}) {
    const auto cfg = GPT2Config::preset(preset);
    GPT2 model(cfg);
    torch::NoGradGuard no_grad;
    // 512 targets: a token's loss spreads by about 0.55, so their mean by about 0.025.
    const auto idx = random_tokens(4, 128, cfg.vocab_size());
    const auto targets = random_tokens(4, 128, cfg.vocab_size());
    EXPECT_NEAR(model(idx, targets).loss.item<double>(), std::log(50257.0), tolerance) << preset;
  }
}

TEST(GPT2, ChangingTokenTNeverChangesEarlierLogits) {
  torch::manual_seed(2);
  const auto cfg = GPT2Config::preset("tiny");
  GPT2 model(cfg);
  model->eval();
  torch::NoGradGuard no_grad;
  const int64_t T = 24;
  const auto idx = random_tokens(2, T, cfg.vocab_size());
  const auto base = model(idx).logits;
  for (int64_t t = 0; t < T; ++t) {
    auto changed = idx.clone();
    changed.select(1, t).add_(1 + t).remainder_(cfg.vocab_size());
    const auto logits = model(changed).logits;
    EXPECT_TRUE(torch::equal(logits.narrow(1, 0, t), base.narrow(1, 0, t))) << "t=" << t;
    EXPECT_GT(max_abs_diff(logits.select(1, t), base.select(1, t)), 0.0) << "t=" << t;
  }
}

TEST(GPT2, Float64GradientsMatchFiniteDifferences) {
  torch::manual_seed(3);
  const auto cfg = GPT2Config::preset("tiny");
  GPT2 model(cfg);
  model->to(torch::kDouble);
  const auto idx = random_tokens(2, 8, cfg.vocab_size());
  auto targets = random_tokens(2, 8, cfg.vocab_size());
  targets[0][3] = -100;
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  for (const auto& item : model->named_parameters()) {
    names.push_back(item.key());
    params.push_back(item.value());
  }
  expect_gradients_match([&] { return model(idx, targets).loss; }, params, names);
}

TEST(GPT2, OverfitsOneBatch) {
  torch::manual_seed(4);
  const auto cfg = GPT2Config::preset("tiny");
  GPT2 model(cfg);
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.0));
  const auto idx = random_tokens(2, 32, cfg.vocab_size());
  const auto targets = random_tokens(2, 32, cfg.vocab_size());
  double loss = 0;
  for (int step = 0; step < 300 && (step == 0 || loss >= 0.05); ++step) {
    opt.zero_grad();
    auto out = model(idx, targets);
    out.loss.backward();
    opt.step();
    loss = out.loss.item<double>();
  }
  EXPECT_LT(loss, 0.05);
}

TEST(GPT2, LogitsMatchHuggingFaceTransformers) {
  const std::string python = test_python(), source = test_source_dir();
  torch::manual_seed(5);
  // Not a preset: an odd vocabulary (padded inside) and more heads exercise the name and shape map.
  const auto cfg = GPT2Config().vocab_size(1000).block_size(64).n_layer(3).n_head(6).n_embd(48);
  GPT2 model(cfg);
  model->eval();
  // Perturb the LayerNorms and biases away from 1 and 0 so every parameter matters to the logits.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(torch::randn_like(p) * 0.05);
  }
  const auto idx = random_tokens(3, 40, cfg.vocab_size());

  c10::Dict<std::string, torch::Tensor> blob;
  blob.insert("config", torch::tensor({cfg.vocab_size(), cfg.block_size(), cfg.n_layer(), cfg.n_head(), cfg.n_embd()},
                                      torch::kLong));
  blob.insert("idx", idx);
  for (const auto& item : model->named_parameters()) blob.insert(item.key(), item.value().detach());

  const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_hf_");
  const std::string in = dir + "/in.pt", out = dir + "/out.bin";
  {
    const auto bytes = torch::pickle_save(c10::IValue(blob));
    std::ofstream(in, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  const std::string cmd = "'" + python + "' '" + source + "/tests/python/hf_gpt2_logits.py' '" + in + "' '" + out + "'";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  torch::NoGradGuard no_grad;
  const auto ours = model(idx).logits;
  auto hf = torch::empty(ours.sizes(), torch::kFloat);
  std::ifstream file(out, std::ios::binary);
  file.read(static_cast<char*>(hf.data_ptr()), static_cast<std::streamsize>(hf.nbytes()));
  ASSERT_EQ(file.gcount(), static_cast<std::streamsize>(hf.nbytes())) << out << " is short";
  llmtrain::fs::remove_tree(dir);
  // Within 1e-5 of the largest logit: both sides are fp32 products whose summation order depends on
  // the CPU's kernels (an H100 host's differed by 1.4e-5 absolute, on logits of several units).
  const float largest = hf.abs().max().item<float>();
  EXPECT_LT(max_abs_diff(ours, hf), 1e-5 * std::max(1.0f, largest));
  EXPECT_GT(largest, 0.1f);  // real logits, not zeros
}

TEST(GPT2, BadConfigsAndInputsNameTheValueAndTheLimit) {
  expect_error([] { GPT2(GPT2Config::preset("tiny").n_head(3)); }, {"n_embd 64", "not divisible by n_head 3"});
  expect_error([] { GPT2(GPT2Config::preset("tiny").n_layer(0)); }, {"n_layer must be in [1, 4096], got 0"});
  expect_error([] { GPT2(GPT2Config::preset("tiny").dropout(1.5)); }, {"dropout", "1.5"});

  const auto cfg = GPT2Config::preset("tiny");
  GPT2 model(cfg);
  expect_error([&] { model(random_tokens(1, 129, cfg.vocab_size())); }, {"sequence length 129", "block_size 128"});
  auto idx = random_tokens(1, 8, cfg.vocab_size());
  idx[0][5] = 50257;
  expect_error([&] { model(idx); }, {"idx", "token id 50257", "[0, 50257)"});
  idx[0][5] = -1;
  expect_error([&] { model(idx); }, {"idx", "token id -1"});
  idx[0][5] = 7;
  auto targets = idx.clone();
  targets[0][2] = 60000;
  expect_error([&] { model(idx, targets); }, {"targets", "token id 60000", "-100"});
  expect_error([&] { model(idx.to(torch::kInt)); }, {"idx must be int64"});
  expect_error([&] { model(idx.flatten()); }, {"idx must be (B, T)"});
  expect_error([&] { model(idx, targets.narrow(1, 0, 4)); }, {"targets must have the shape"});
}

TEST(GPT2, CudaMatchesCpu_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  torch::manual_seed(6);
  const auto cfg = GPT2Config::preset("tiny");
  GPT2 cpu(cfg);
  auto gpu = std::dynamic_pointer_cast<llmtrain::nn::GPT2Impl>(cpu->clone(torch::kCUDA));
  const auto idx = random_tokens(3, 100, cfg.vocab_size());
  auto targets = random_tokens(3, 100, cfg.vocab_size());
  targets[1][7] = -100;
  llmtrain::testing::expect_gpu_matches_cpu(cpu, gpu, idx, targets);
  // Bad ids are caught on the device too, without a wait: check_inputs() (or the next forward) reports
  // them, and the bad row is NaN in the meantime.
  auto bad = idx.cuda();
  bad[0][3] = 50257;
  const auto logits = gpu->forward(bad).logits;
  EXPECT_TRUE(logits[0][3].isnan().all().item<bool>());
  expect_error([&] { gpu->check_inputs(); }, {"GPT2: idx holds token id 50257 at (0, 3)", "[0, 50257)"});
  auto bad_targets = targets.cuda();
  bad_targets[2][9] = -7;
  gpu->forward(idx.cuda(), bad_targets);
  torch::cuda::synchronize();
  expect_error([&] { gpu->forward(idx.cuda()); }, {"GPT2: targets holds token id -7 at (2, 9)", "-100"});
  EXPECT_NO_THROW(gpu->check_inputs());
}

TEST(GPT2, LossAloneEqualsForwardsLoss) {
  torch::manual_seed(8);
  const auto cfg = GPT2Config::preset("tiny");
  GPT2 a(cfg);
  auto b = std::dynamic_pointer_cast<llmtrain::nn::GPT2Impl>(a->clone());
  const auto idx = random_tokens(2, 40, cfg.vocab_size()), targets = random_tokens(2, 40, cfg.vocab_size());
  const auto la = a(idx, targets).loss, lb = b->loss(idx, targets);
  EXPECT_EQ(la.item<double>(), lb.item<double>());
  la.backward();
  lb.backward();
  const auto pa = a->named_parameters();
  for (const auto& item : b->named_parameters())
    EXPECT_TRUE(torch::equal(item.value().grad(), pa[item.key()].grad())) << item.key();
  expect_error([&] { b->loss(idx, {}); }, {"targets are required"});
  // A frozen head (LoRA's) takes ops::linear_cross_entropy, which never holds the whole logits: the
  // same loss, the same gradients of everything else.
  a->transformer->wte->weight.requires_grad_(false);
  b->transformer->wte->weight.requires_grad_(false);
  a->zero_grad();
  b->zero_grad();
  a->to(torch::kDouble);
  b->to(torch::kDouble);
  const auto fa = a(idx, targets).loss, fb = b->loss(idx, targets);
  EXPECT_NEAR(fa.item<double>(), fb.item<double>(), 1e-12);
  fa.backward();
  fb.backward();
  for (const auto& item : b->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    EXPECT_LT(max_abs_diff(item.value().grad(), pa[item.key()].grad()), 1e-12) << item.key();
  }
}

// The whole model with bf16 parameters on the GPU: the fused kernels against the same
// model on ATen's paths (kernels off), loss and every gradient within bf16 tolerance.
TEST(GPT2, FusedPathMatchesATenPathInBF16_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  torch::manual_seed(9);
  const auto cfg = GPT2Config::preset("tiny").n_layer(3);
  GPT2 ref(cfg);
  ref->to(torch::kCUDA, torch::kBFloat16);
  auto fused = std::dynamic_pointer_cast<llmtrain::nn::GPT2Impl>(ref->clone(torch::kCUDA));
  const auto idx = random_tokens(4, 128, cfg.vocab_size()).cuda();
  auto targets = random_tokens(4, 128, cfg.vocab_size()).cuda();
  targets.narrow(1, 0, 5).fill_(-100);
  llmtrain::ops::set_cuda_kernels_enabled(false);
  const auto want = ref(idx, targets).loss;
  want.backward();
  llmtrain::ops::set_cuda_kernels_enabled(true);
  const auto got = fused->loss(idx, targets);
  got.backward();
  EXPECT_NEAR(got.item<double>(), want.item<double>(), 1e-2 * want.item<double>());
  const auto want_grads = ref->named_parameters();
  for (const auto& item : fused->named_parameters()) {
    const auto g = item.value().grad().to(torch::kDouble), w = want_grads[item.key()].grad().to(torch::kDouble);
    // Relative error of the whole gradient tensor: bf16 rounding of two different op orders.
    EXPECT_LT(((g - w).norm() / w.norm()).item<double>(), 3e-2) << item.key();
  }
}
