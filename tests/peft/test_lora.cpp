// peft/ against PEFT (tests/python/peft_peer.py): adapters PEFT saves on random tiny transformers
// models of GPT-2 (Conv1D layers, a module to save), Llama (all-linear, tied head) and Qwen2 (biases,
// rsLoRA, rank and alpha patterns, the head to save), loaded onto the base that transformers saved,
// give PEFT's logits unmerged and those of its merge_and_unload merged; adapters llmtrain saves load
// in PEFT with the same logits; LoRA training takes PEFT's steps; and bad adapters and configs are
// refused whole.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "llmtrain/core/fs.h"
#include "llmtrain/infer/generate.h"
#include "llmtrain/io/hf_model.h"
#include "llmtrain/io/safetensors.h"
#include "llmtrain/optim/optimizer.h"
#include "llmtrain/peft/lora.h"
#include "test_util.h"

namespace {

using llmtrain::testing::expect_error;
using llmtrain::testing::max_abs_diff;

int peer(const std::string& args) {
  return llmtrain::testing::run_command("'" + llmtrain::testing::test_python() + "' '" +
                                        llmtrain::testing::test_source_dir() + "/tests/python/peft_peer.py' " + args +
                                        " > /dev/null 2>&1");
}

// PEFT's files for `which` in a fresh folder: base/, adapter/, ids.json, merged.bin.
std::string make(const std::string& which) {
  const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_lora_");
  EXPECT_EQ(peer("make " + which + " '" + dir + "'"), 0) << "peft_peer.py make " << which;
  return dir;
}

std::string q(const std::string& s) { return "'" + s + "'"; }

// A greedy continuation of the first row of `idx`.
std::vector<int32_t> greedy(const std::shared_ptr<llmtrain::nn::CausalLM>& model, const torch::Tensor& idx) {
  const auto row = idx[0].to(torch::kInt);
  llmtrain::infer::SamplingOptions o;
  o.temperature = 0;
  return llmtrain::infer::generate(model, std::vector<int32_t>(row.data_ptr<int32_t>(), row.data_ptr<int32_t>() + 8),
                                   12, o);
}

torch::Tensor logits_of(llmtrain::nn::CausalLM& model, const torch::Tensor& idx) {
  torch::NoGradGuard no_grad;
  model.module().eval();
  return model.logits(idx).narrow(-1, 0, model.vocab_size()).contiguous();
}

// The weights of every parameter, to see that a refused adapter changed none.
std::vector<torch::Tensor> snapshot(llmtrain::nn::CausalLM& model) {
  std::vector<torch::Tensor> out;
  for (const auto& p : model.module().parameters()) out.push_back(p.detach().clone());
  return out;
}

bool unchanged(llmtrain::nn::CausalLM& model, const std::vector<torch::Tensor>& before) {
  const auto now = model.module().parameters();
  for (size_t i = 0; i < now.size(); ++i)
    if (!torch::equal(now[i], before[i])) return false;
  return true;
}

// Rewrites DIR/adapter/adapter_config.json with `edit` applied.
void edit_config(const std::string& dir, const std::function<void(nlohmann::json&)>& edit) {
  const std::string path = dir + "/adapter/adapter_config.json";
  auto j = nlohmann::json::parse(llmtrain::fs::read_file(path));
  edit(j);
  llmtrain::fs::write_file_atomic(path, j.dump());
}

}  // namespace

TEST(Lora, MergedAdaptersGivePeftsMergedLogits) {
  for (const std::string which : {"gpt2", "llama", "qwen2"}) {
    SCOPED_TRACE(which);
    const std::string dir = make(which);
    auto model = llmtrain::io::load_hf_model(dir + "/base");
    const auto idx = llmtrain::testing::ids_file(dir + "/ids.json");
    const auto base = logits_of(*model, idx);
    const auto want = llmtrain::testing::floats_file(dir + "/merged.bin", base.sizes());
    EXPECT_GT(max_abs_diff(base, want), 1e-3) << "the adapter changes the logits";
    const auto layers = llmtrain::peft::merge_lora(*model, dir + "/adapter");
    const size_t expected = which == "gpt2" ? 4 : which == "llama" ? 14 : 6;  // 2 layers x targets
    EXPECT_EQ(layers.size(), expected);
    const auto ours = logits_of(*model, idx);
    const float largest = want.abs().max().item<float>();
    EXPECT_LT(max_abs_diff(ours, want), 1e-5 * std::max(1.0f, largest));
    llmtrain::fs::remove_tree(dir);
  }
}

TEST(Lora, UnmergedAdaptersGivePeftsLogitsAndSavedOnesLoadInPeft) {
  for (const std::string which : {"gpt2", "llama", "qwen2"}) {
    SCOPED_TRACE(which);
    const std::string dir = make(which);
    auto model = llmtrain::io::load_hf_model(dir + "/base");
    auto merged = llmtrain::io::load_hf_model(dir + "/base");
    llmtrain::peft::merge_lora(*merged, dir + "/adapter");
    const auto idx = llmtrain::testing::ids_file(dir + "/ids.json");
    const auto cfg = llmtrain::peft::load_lora(*model, dir + "/adapter");
    const auto ours = logits_of(*model, idx);
    const auto want = llmtrain::testing::floats_file(dir + "/peft.bin", ours.sizes());
    const float largest = want.abs().max().item<float>();
    EXPECT_LT(max_abs_diff(ours, want), 1e-5 * std::max(1.0f, largest));
    // Only the adapters and the modules to save train.
    for (const auto& p : model->module().named_parameters())
      EXPECT_EQ(p.value().requires_grad(), p.key().find(".adapter.lora_") != std::string::npos ||
                                               p.key().rfind("lm_head.", 0) == 0 ||
                                               p.key().rfind("transformer.ln_f.", 0) == 0)
          << p.key();
    // Generation with the adapters attached (the decode step's unfused path) is the merged model's.
    EXPECT_EQ(greedy(model, idx), greedy(merged, idx));
    // Saved by llmtrain, read by PEFT: the same logits.
    llmtrain::peft::save_lora(*model, cfg, dir + "/ours");
    ASSERT_EQ(peer("logits " + q(dir + "/base") + " " + q(dir + "/ours") + " " + q(dir + "/ids.json") + " " +
                   q(dir + "/ours.bin")),
              0);
    const auto theirs = llmtrain::testing::floats_file(dir + "/ours.bin", ours.sizes());
    EXPECT_LT(max_abs_diff(theirs, ours), 1e-5 * std::max(1.0f, largest));
    // Merged in place: the merged model's logits, and a plain model again.
    EXPECT_EQ(llmtrain::peft::merge_lora(*model).size(), which == "gpt2" ? 4u : which == "llama" ? 14u : 6u);
    EXPECT_LT(max_abs_diff(logits_of(*model, idx), logits_of(*merged, idx)), 1e-5 * std::max(1.0f, largest));
    for (const auto& p : model->module().named_parameters()) EXPECT_EQ(p.key().find(".adapter."), std::string::npos);
    llmtrain::fs::remove_tree(dir);
  }
}

TEST(Lora, TrainsAsPeftDoes) {
  for (const std::string which : {"gpt2", "llama"}) {
    SCOPED_TRACE(which);
    const std::string dir = make(which);
    auto model = llmtrain::io::load_hf_model(dir + "/base");
    const auto idx = llmtrain::testing::ids_file(dir + "/ids.json");
    const auto base = logits_of(*model, idx);
    llmtrain::peft::LoraConfig cfg;
    cfg.r = 4;
    cfg.lora_alpha = 8;
    if (which == "gpt2") {
      cfg.target_modules = {"c_attn", "c_fc"};
      cfg.modules_to_save = {"ln_f"};
    } else {
      cfg.all_linear = true;
    }
    torch::manual_seed(7);
    llmtrain::peft::add_lora(*model, cfg);
    EXPECT_EQ(max_abs_diff(logits_of(*model, idx), base), 0) << "B starts at zero: the base's logits";
    llmtrain::peft::save_lora(*model, cfg, dir + "/start");
    const int steps = 8;
    ASSERT_EQ(peer("train " + q(dir + "/base") + " " + q(dir + "/start") + " " + q(dir + "/ids.json") + " " +
                   std::to_string(steps) + " 0.01 " + q(dir)),
              0);
    const auto frozen = snapshot(*model);
    llmtrain::optim::OptimizerOptions o;
    o.schedule.lr = 0.01;
    o.schedule.max_steps = steps;
    o.grad_clip = 0;
    llmtrain::optim::MixedPrecisionOptimizer opt(model->module(), o);
    model->module().eval();  // dropout off, as the peer's
    std::vector<double> losses;
    for (int s = 0; s < steps; ++s) {
      const auto loss = model->loss(idx.narrow(1, 0, idx.size(1) - 1), idx.narrow(1, 1, idx.size(1) - 1), {});
      losses.push_back(loss.item<double>());
      opt.scale_loss(loss).backward();
      opt.step(s);
    }
    const auto theirs = nlohmann::json::parse(llmtrain::fs::read_file(dir + "/losses.json")).get<std::vector<double>>();
    ASSERT_EQ(theirs.size(), losses.size());
    for (size_t s = 0; s < losses.size(); ++s) EXPECT_NEAR(losses[s], theirs[s], 1e-5) << "step " << s;
    EXPECT_LT(losses.back(), losses.front() - 0.1) << "the adapter learns";
    // The trained adapters (and the module to save) are PEFT's, and nothing else moved.
    const llmtrain::io::SafetensorsFile trained(dir + "/adapter/adapter_model.safetensors");
    const auto mine = llmtrain::peft::lora_tensors(*model, cfg);
    ASSERT_EQ(mine.size(), trained.names().size());
    for (const auto& [name, t] : mine) EXPECT_LT(max_abs_diff(t, trained.get(name)), 1e-4) << name;
    const auto now = model->module().parameters();
    for (size_t i = 0; i < now.size(); ++i) {
      if (!now[i].requires_grad()) {
        EXPECT_TRUE(torch::equal(now[i], frozen[i]));
      }
    }
    llmtrain::fs::remove_tree(dir);
  }
}

TEST(Lora, BadConfigsAreRefusedNamedWithTheModelUntouched) {
  const std::string dir = make("llama");
  auto model = llmtrain::io::load_hf_model(dir + "/base");
  const auto before = snapshot(*model);
  const auto refused = [&](const std::function<void(llmtrain::peft::LoraConfig&)>& edit, const std::string& message) {
    llmtrain::peft::LoraConfig cfg;
    cfg.target_modules = {"q_proj", "v_proj"};
    edit(cfg);
    expect_error([&] { llmtrain::peft::add_lora(*model, cfg); }, {message});
    EXPECT_TRUE(unchanged(*model, before)) << message;
    for (const auto& p : model->module().parameters()) EXPECT_TRUE(p.requires_grad()) << message;
  };
  refused([](auto& c) { c.target_modules = {"c_attn"}; }, "target_modules match no linear layer of the llama model");
  refused([](auto& c) { c.r = 17; }, "r 17 is larger than layer model.layers.0.self_attn.v_proj (16 x 32): at most 16");
  refused([](auto& c) { c.modules_to_save = {"lm_head"}; }, "modules_to_save names lm_head, which is no module");
  llmtrain::peft::LoraConfig cfg;
  cfg.target_modules = {"q_proj"};
  llmtrain::peft::add_lora(*model, cfg);
  expect_error([&] { llmtrain::peft::add_lora(*model, cfg); },
               {"layer model.layers.0.self_attn.q_proj has an adapter already"});
  llmtrain::fs::remove_tree(dir);
}

TEST(Lora, ReadsPeftsOptionsAndMatchesItsTargets) {
  const std::string dir = make("qwen2");
  const auto cfg = llmtrain::peft::read_lora_config(dir + "/adapter");
  EXPECT_EQ(cfg.r, 4);
  EXPECT_TRUE(cfg.use_rslora);
  EXPECT_TRUE(cfg.targets("model.layers.1.self_attn.q_proj", false));
  EXPECT_FALSE(cfg.targets("model.layers.1.self_attn.k_proj", false));
  EXPECT_FALSE(cfg.targets("model.layers.1.self_attn.xq_proj", false));  // a whole name or a dotted suffix
  EXPECT_EQ(cfg.rank_of("model.layers.0.mlp.down_proj"), 2);             // rank_pattern
  EXPECT_DOUBLE_EQ(cfg.scaling_of("model.layers.0.mlp.down_proj"), 8 / std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(cfg.scaling_of("model.layers.0.self_attn.v_proj"), 3 / std::sqrt(4.0));  // alpha_pattern
  EXPECT_DOUBLE_EQ(cfg.scaling_of("model.layers.0.self_attn.q_proj"), 8 / std::sqrt(4.0));
  llmtrain::peft::LoraConfig all;
  all.all_linear = true;
  EXPECT_TRUE(all.targets("model.layers.0.mlp.up_proj", false));
  EXPECT_FALSE(all.targets("lm_head", true));
  llmtrain::peft::LoraConfig regex;
  regex.target_regex = R"(.*\.(q|v)_proj)";
  EXPECT_TRUE(regex.targets("model.layers.3.self_attn.v_proj", false));
  EXPECT_FALSE(regex.targets("model.layers.3.self_attn.o_proj", false));
  llmtrain::fs::remove_tree(dir);
}

TEST(Lora, BadAdaptersAreRefusedNamedWithTheModelUntouched) {
  const std::string dir = make("llama");
  auto model = llmtrain::io::load_hf_model(dir + "/base");
  const auto before = snapshot(*model);
  const std::string adapter = dir + "/adapter";
  const auto refused = [&](const std::function<void(nlohmann::json&)>& edit, const std::string& message) {
    const std::string original = llmtrain::fs::read_file(adapter + "/adapter_config.json");
    edit_config(dir, edit);
    expect_error([&] { llmtrain::peft::merge_lora(*model, adapter); }, {message});
    EXPECT_TRUE(unchanged(*model, before)) << message;
    llmtrain::fs::write_file_atomic(adapter + "/adapter_config.json", original);
  };
  refused([](auto& j) { j["use_dora"] = true; }, "adapter_config.json: use_dora true is not supported");
  refused([](auto& j) { j["bias"] = "all"; }, "adapter_config.json: bias all is not supported");
  refused([](auto& j) { j["peft_type"] = "IA3"; }, "adapter_config.json: peft_type IA3 is not supported");
  refused([](auto& j) { j["layers_to_transform"] = {0}; }, "layers_to_transform [0] is not supported");
  refused([](auto& j) { j["target_modules"] = {"c_attn"}; }, "target_modules match no linear layer of the llama model");
  refused([](auto& j) { j["target_modules"] = {"q_proj"}; },
          "layer model.layers.0.mlp.down_proj is not among adapter_config.json's target_modules");
  refused([](auto& j) { j["r"] = 8; }, "need lora_A [8, 48] and lora_B [32, 8]");
  refused([](auto& j) { j["target_modules"] = "(["; }, "target_modules \"([\" is not a regular expression");

  // An adapter of another shape's base: named with both shapes.
  const std::string other = make("qwen2");
  expect_error([&] { llmtrain::peft::merge_lora(*model, other + "/adapter"); },
               {"layer model.layers.0.mlp.down_proj has lora_A [2, 40] and lora_B [32, 2]; its weight [32, 48]"});
  EXPECT_TRUE(unchanged(*model, before));
  // A targeted layer missing from the file.
  const std::string file = adapter + "/adapter_model.safetensors";
  std::vector<std::pair<std::string, torch::Tensor>> kept;
  const llmtrain::io::SafetensorsFile f(file);
  for (const auto& name : f.names())
    if (name.find("layers.1.self_attn.k_proj") == std::string::npos) kept.emplace_back(name, f.get(name).clone());
  llmtrain::io::save_safetensors(file + ".tmp", kept, {});
  std::filesystem::rename(file + ".tmp", file);
  expect_error([&] { llmtrain::peft::merge_lora(*model, adapter); },
               {"no lora_A and lora_B for the targeted layer model.layers.1.self_attn.k_proj"});
  EXPECT_TRUE(unchanged(*model, before));
  llmtrain::io::save_safetensors(file + ".tmp",
                                 {{"base_model.model.model.embed_tokens.lora_embedding_A", torch::ones({4, 96})}}, {});
  std::filesystem::rename(file + ".tmp", file);
  expect_error([&] { llmtrain::peft::merge_lora(*model, adapter); },
               {"lora_embedding_A is not supported (LoRA on embeddings, DoRA)"});
  EXPECT_TRUE(unchanged(*model, before));
  expect_error([&] { llmtrain::peft::merge_lora(*model, dir); },
               {"PEFT adapter folder " + dir + ": no adapter_config.json"});
  llmtrain::fs::remove_tree(dir);
  llmtrain::fs::remove_tree(other);
}
