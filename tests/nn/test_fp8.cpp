// fp8 layers in the models (nn::enable_fp8, nn/adapter.h): every linear layer of a block but the skipped
// takes ops::fp8_linear, the loss and gradients stay near full precision's once the scales follow the
// amaxes, the scales travel with the module's files, and a layer with an adapter is refused.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>

#include "llmtrain/nn/adapter.h"
#include "llmtrain/nn/causal_lm.h"
#include "llmtrain/peft/lora.h"
#include "test_util.h"

namespace {

struct Pass {
  double loss;
  std::vector<torch::Tensor> grads;
};

Pass run(llmtrain::nn::CausalLM& model, const torch::Tensor& idx) {
  model.module().zero_grad();
  const int64_t T = idx.size(1) - 1;
  const auto loss = model.loss(idx.narrow(1, 0, T), idx.narrow(1, 1, T), torch::Tensor());
  loss.backward();
  Pass p{loss.item<double>(), {}};
  for (const auto& v : model.module().parameters())
    if (v.grad().defined()) p.grads.push_back(v.grad().clone().flatten());
  return p;
}

}  // namespace

TEST(Fp8, ModelsTrainThroughFp8LayersNearFullPrecision) {
  for (const std::string preset : {"tiny", "llama-tiny"}) {
    SCOPED_TRACE(preset);
    torch::manual_seed(5);
    auto full = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset(preset));
    torch::manual_seed(5);
    auto fp8 = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset(preset));
    const auto names = llmtrain::nn::enable_fp8(fp8->module(), 4, {"lm_head"});
    ASSERT_FALSE(names.empty());
    EXPECT_TRUE(std::none_of(names.begin(), names.end(), [](const std::string& n) { return n == "lm_head"; }));
    int64_t linears = 0, heads = 0;  // the presets tie their heads: no lm_head layer
    for (const auto& m : fp8->module().named_modules("", false)) {
      linears += dynamic_cast<torch::nn::LinearImpl*>(m.value().get()) != nullptr;
      heads += m.key() == "lm_head";
    }
    EXPECT_EQ(int64_t(names.size()), linears - heads) << "every linear layer but the head";
    EXPECT_EQ(int64_t(llmtrain::nn::enable_fp8(fp8->module(), 4, {}).size()), heads) << "none twice";
    const auto idx = torch::randint(full->vocab_size(), {2, 33}, torch::kLong);
    const Pass want = run(*full, idx);
    run(*fp8, idx);  // the first step takes its scales from its own tensors and fills the histories
    for (const auto& b : fp8->module().named_buffers()) {
      if (b.key().find(".fp8.scale") != std::string::npos) {
        EXPECT_TRUE(b.value().gt(0).all().item<bool>()) << b.key() << " " << b.value();
      }
    }
    EXPECT_EQ(llmtrain::nn::update_fp8_scales(fp8->module(), 0), linears);
    const Pass got = run(*fp8, idx);
    EXPECT_NEAR(got.loss, want.loss, 0.02 * want.loss);
    ASSERT_EQ(got.grads.size(), want.grads.size());
    const auto a = torch::cat(got.grads), b = torch::cat(want.grads);
    const double cosine = (a * b).sum().item<double>() / (a.norm() * b.norm()).item<double>();
    EXPECT_GT(cosine, 0.98);
    EXPECT_LT(cosine, 1 - 1e-7) << "the products did go through fp8";
  }
}

TEST(Fp8, ScalesTravelWithTheModulesFiles) {
  llmtrain::testing::TempDir dir;
  torch::manual_seed(6);
  auto a = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset("llama-tiny"));
  llmtrain::nn::enable_fp8(a->module(), 3, {});
  run(*a, torch::randint(a->vocab_size(), {1, 17}, torch::kLong));
  llmtrain::nn::update_fp8_scales(a->module(), 1);
  torch::save(a->module().shared_from_this(), dir.path + "/m.pt");
  auto b = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset("llama-tiny"));
  llmtrain::nn::enable_fp8(b->module(), 3, {});
  auto module = b->module().shared_from_this();
  torch::load(module, dir.path + "/m.pt");
  const auto ba = a->module().named_buffers(), bb = b->module().named_buffers();
  int64_t fp8_buffers = 0;
  for (const auto& item : ba)
    if (item.key().find(".fp8.") != std::string::npos) {
      ++fp8_buffers;
      ASSERT_TRUE(bb.contains(item.key())) << item.key();
      EXPECT_TRUE(torch::equal(item.value(), bb[item.key()])) << item.key();
    }
  EXPECT_GT(fp8_buffers, 0);
}

TEST(Fp8, LayersWithAnAdapterAreRefused) {
  auto model = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset("tiny"));
  llmtrain::peft::LoraConfig cfg;
  cfg.all_linear = true;
  llmtrain::peft::add_lora(*model, cfg);
  llmtrain::testing::expect_error([&] { llmtrain::nn::enable_fp8(model->module(), 4, {}); },
                                  {"fp8: layer ", "has an adapter or a stored weight"});
}
