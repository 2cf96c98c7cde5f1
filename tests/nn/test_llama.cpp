// nn::Llama against transformers' LlamaForCausalLM, MistralForCausalLM and Qwen2ForCausalLM (through
// tests/python/hf_llama_peer.py): random tiny models of each family that transformers saves load with
// its logits, export back with them, and each preset has the parameter count transformers reports.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <sstream>

#include "../../src/io/hf_config.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/infer/generate.h"
#include "llmtrain/io/hf_llama.h"
#include "llmtrain/nn/llama.h"
#include "llmtrain/optim/optimizer.h"
#include "test_util.h"

namespace {

using llmtrain::nn::LlamaConfig;
using llmtrain::testing::expect_error;
using llmtrain::testing::max_abs_diff;

int peer(const std::string& args) {
  return llmtrain::testing::run_command("'" + llmtrain::testing::test_python() + "' '" +
                                        llmtrain::testing::test_source_dir() + "/tests/python/hf_llama_peer.py' " +
                                        args + " > /dev/null 2>&1");
}

std::string peer_output(const std::string& args) {
  const std::string cmd = "'" + llmtrain::testing::test_python() + "' '" + llmtrain::testing::test_source_dir() +
                          "/tests/python/hf_llama_peer.py' " + args + " 2>/dev/null";
  FILE* p = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[256];
  while (p && std::fgets(buf, sizeof(buf), p)) out += buf;
  if (p) ::pclose(p);
  return out;
}

// Within 1e-5 of the largest logit (fp32 on both sides, sums in the order each library's kernels take).
void expect_same_logits(const torch::Tensor& ours, const torch::Tensor& theirs, const std::string& what) {
  const float largest = theirs.abs().max().item<float>();
  EXPECT_LT(max_abs_diff(ours, theirs), 1e-5 * std::max(1.0f, largest)) << what;
  EXPECT_GT(largest, 0.1f) << what;  // real logits, not zeros
}

}  // namespace

TEST(Llama, EachFamilyLoadsFoldersTransformersSavedWithItsLogitsAndExportsThemBack) {
  for (const std::string family : {"llama", "mistral", "qwen2"}) {
    SCOPED_TRACE(family);
    const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_llama_"), theirs = dir + "/theirs",
                      ours = dir + "/ours";
    ASSERT_EQ(peer("make " + family + " '" + theirs + "'"), 0);
    auto model = llmtrain::io::load_hf_llama(theirs);
    model->eval();
    EXPECT_EQ(model->cfg.family().name(), family);
    const auto idx = llmtrain::testing::ids_file(theirs + "/ids.json");
    torch::NoGradGuard no_grad;
    const auto logits = model(idx).logits;
    const auto shape = logits.sizes();
    expect_same_logits(logits, llmtrain::testing::floats_file(theirs + "/logits.bin", shape), "loaded");
    // Greedy generation through the KV cache picks the 32 ids transformers' generate() picks.
    const auto prompt_row = idx[0].narrow(0, 0, 8);
    const std::vector<int32_t> prompt(prompt_row.data_ptr<int64_t>(), prompt_row.data_ptr<int64_t>() + 8);
    llmtrain::infer::SamplingOptions greedy;
    greedy.temperature = 0;
    auto ours_ids = llmtrain::infer::generate(model, prompt, 32, greedy);
    ours_ids.erase(ours_ids.begin(), ours_ids.begin() + 8);
    const auto want =
        nlohmann::json::parse(llmtrain::fs::read_file(theirs + "/greedy.json")).get<std::vector<int32_t>>();
    EXPECT_EQ(ours_ids, want);
    // The same model written out: transformers reads it back to the same logits.
    llmtrain::io::save_hf_llama(model, ours);
    llmtrain::fs::write_file_atomic(ours + "/ids.json", llmtrain::fs::read_file(theirs + "/ids.json"));
    ASSERT_EQ(peer("logits '" + ours + "' '" + dir + "/out.bin'"), 0);
    expect_same_logits(logits, llmtrain::testing::floats_file(dir + "/out.bin", shape), "exported");
    llmtrain::fs::remove_tree(dir);
  }
  // The tiny presets are these shapes.
  for (const auto& [preset, family] : {std::pair{"llama-tiny", "llama"}, {"mistral-tiny", "mistral"}}) {
    const auto cfg = LlamaConfig::preset(preset);
    EXPECT_EQ(cfg.family().name(), std::string(family));
  }
}

TEST(Llama, PresetsHaveTheParameterCountTransformersReports) {
  const auto names = LlamaConfig::preset_names();
  auto configs = nlohmann::json::array();
  for (const auto& name : names) {
    const auto cfg = LlamaConfig::preset(name);
    cfg.validate();
    auto json = nlohmann::json::parse(llmtrain::io::detail::hf_llama_config_json(cfg, "float32", -1, -1));
    json.erase("architectures");
    json.erase("torch_dtype");
    configs.push_back(json);
  }
  std::istringstream counts(peer_output("count '" + configs.dump() + "'"));  // one Python for them all
  for (const auto& name : names) {
    int64_t theirs = -1;
    counts >> theirs;
    EXPECT_EQ(theirs, LlamaConfig::preset(name).num_parameters()) << name;
  }
  EXPECT_EQ(LlamaConfig::preset("llama-3.2-1b").num_parameters(), 1235814400);  // the model card's 1.24B
}

TEST(Llama, PackedDocumentsAttendOnlyWithinThemselvesAndTheLossIsTheForwards) {
  torch::manual_seed(3);
  llmtrain::nn::Llama model(LlamaConfig::preset("mistral-tiny"));
  const auto idx = torch::randint(0, 256, {2, 20}, torch::kLong);
  const auto targets = torch::randint(0, 256, {2, 20}, torch::kLong);
  // Row 0: documents of 12 and 8 tokens. The second document alone, at positions 0..7, gives the same
  // logits as inside the packed row.
  auto positions = torch::cat({torch::arange(12), torch::arange(8)}).to(torch::kLong).unsqueeze(0).repeat({2, 1});
  torch::NoGradGuard no_grad;
  const auto packed = model->forward(idx, {}, positions).logits;
  const auto alone = model(idx.narrow(1, 12, 8)).logits;
  EXPECT_LT(max_abs_diff(packed.narrow(1, 12, 8), alone), 1e-5);
  const auto out = model(idx, targets);
  EXPECT_NEAR(model->loss(idx, targets).item<double>(), out.loss.item<double>(), 1e-6);
  // The sliding window (8) shapes the logits of sequences longer than it.
  auto wide = LlamaConfig::preset("mistral-tiny").sliding_window(0).family(llmtrain::nn::LlamaFamily::kLlama);
  llmtrain::nn::Llama unwindowed(wide);
  for (size_t i = 0; i < model->parameters().size(); ++i) unwindowed->parameters()[i].copy_(model->parameters()[i]);
  EXPECT_LT(max_abs_diff(unwindowed(idx.narrow(1, 0, 8)).logits, model(idx.narrow(1, 0, 8)).logits), 1e-6);
  EXPECT_GT(max_abs_diff(unwindowed(idx).logits, model(idx).logits), 1e-4);
}

// A frozen head (LoRA's) takes ops::linear_cross_entropy, which never holds the whole logits: the same
// loss and the same gradients as the logits' path, with a tied head and with its own.
TEST(Llama, AFrozenHeadsLossIsTheLogitsPathsWithTheSameGradients) {
  for (const char* preset : {"llama-tiny", "mistral-tiny"}) {
    SCOPED_TRACE(preset);
    torch::manual_seed(5);
    llmtrain::nn::Llama model(LlamaConfig::preset(preset));
    model->to(torch::kDouble);
    const torch::Tensor head = model->lm_head ? model->lm_head->weight : model->model->embed_tokens->weight;
    head.requires_grad_(false);
    const auto idx = torch::randint(0, 256, {2, 9}, torch::kLong);
    auto targets = torch::randint(0, 256, {2, 9}, torch::kLong);
    targets[0][3] = -100;  // ignored
    const auto grads = [&](const torch::Tensor& loss) {
      model->zero_grad();
      loss.backward();
      std::vector<torch::Tensor> g;
      for (const auto& p : model->parameters())
        if (p.requires_grad()) g.push_back(p.grad().clone());
      return g;
    };
    const auto via_logits = model(idx, targets).loss;
    const auto want = grads(via_logits);
    const auto loss = model->loss(idx, targets);
    EXPECT_NEAR(loss.item<double>(), via_logits.item<double>(), 1e-12);
    const auto got = grads(loss);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_LT(max_abs_diff(got[i], want[i]), 1e-12) << i;
  }
}

TEST(Llama, BadConfigsAndFoldersNameTheKeyAndTheFile) {
  const auto parse = [](const std::string& text) { llmtrain::io::detail::parse_hf_llama_config(text, "c.json"); };
  const std::string base =
      R"("vocab_size": 256, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 256)";
  expect_error([&] { parse(R"({"model_type": "falcon", )" + base + "}"); },
               {"c.json", "model_type falcon is not supported"});
  expect_error([&] { parse(R"({"model_type": "llama", "hidden_act": "gelu", )" + base + "}"); },
               {"c.json", "hidden_act \"gelu\" is not supported"});
  expect_error(
      [&] { parse(R"({"model_type": "llama", "rope_scaling": {"rope_type": "yarn", "factor": 2}, )" + base + "}"); },
      {"c.json", "rope_scaling.rope_type \"yarn\" is not supported", "llama3"});
  expect_error([&] { parse(R"({"model_type": "qwen2", "use_sliding_window": true, )" + base + "}"); },
               {"c.json", "use_sliding_window true is not supported"});
  expect_error(
      [&] {
        parse(R"({"model_type": "llama", "num_key_value_heads": 3, )" +
              base.substr(0, base.find("\"num_key_value_heads\"")) + R"("max_position_embeddings": 256})");
      },
      {"c.json", "n_head 4 is not a multiple of n_kv_head 3"});
  expect_error([&] { parse(R"({"model_type": "llama"})"); }, {"c.json", "vocab_size"});
  // A folder whose tensor has the wrong shape, and one with a tensor no model of the config has.
  const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_llama_bad_");
  llmtrain::nn::Llama model(LlamaConfig::preset("qwen2-tiny"));
  llmtrain::io::save_hf_llama(model, dir + "/m");
  auto cfg = nlohmann::json::parse(llmtrain::fs::read_file(dir + "/m/config.json"));
  cfg["intermediate_size"] = 100;
  llmtrain::fs::write_file_atomic(dir + "/m/config.json", cfg.dump());
  expect_error([&] { llmtrain::io::load_hf_llama(dir + "/m"); },
               {"model.safetensors", "mlp.gate_proj.weight", "has shape [96, 64]", "needs [100, 64]"});
  cfg["intermediate_size"] = 96;
  cfg["model_type"] = "mistral";
  llmtrain::fs::write_file_atomic(dir + "/m/config.json", cfg.dump());
  expect_error([&] { llmtrain::io::load_hf_llama(dir + "/m"); },
               {"model.safetensors", "_proj.bias", "is not part of this mistral model"});
  llmtrain::fs::remove_tree(dir);
}

// Each tiny family on the GPU: logits, loss and gradients as on the CPU (fp32, through the CUDA paths
// of llmtrain's ops), a bad id reported by check_inputs() without a wait, and a bf16 autocast step.
TEST(Llama, CudaMatchesCpu_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  for (const std::string preset : {"llama-tiny", "mistral-tiny", "qwen2-tiny"}) {
    SCOPED_TRACE(preset);
    torch::manual_seed(6);
    llmtrain::nn::Llama cpu(LlamaConfig::preset(preset));
    auto gpu = std::dynamic_pointer_cast<llmtrain::nn::LlamaImpl>(cpu->clone(torch::kCUDA));
    const auto idx = torch::randint(0, 256, {3, 40}, torch::kLong);
    auto targets = torch::randint(0, 256, {3, 40}, torch::kLong);
    targets[1][7] = -100;
    llmtrain::testing::expect_gpu_matches_cpu(cpu, gpu, idx, targets);
    auto bad = idx.cuda();
    bad[0][3] = 256;
    gpu->forward(bad);
    expect_error([&] { gpu->check_inputs(/*wait=*/true); }, {"Llama", "idx", "256"});
    {
      torch::Tensor loss;
      {
        llmtrain::optim::AutocastScope amp(torch::kCUDA, llmtrain::optim::Precision::kBF16);
        loss = gpu->loss(idx.cuda(), targets.cuda());
      }
      EXPECT_NEAR(loss.item<double>(), cpu->forward(idx, targets).loss.item<double>(), 0.05);
      loss.backward();
    }
  }
}
