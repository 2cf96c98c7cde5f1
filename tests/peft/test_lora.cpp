// peft::merge_lora against PEFT (tests/python/peft_peer.py): adapters PEFT saves on random tiny
// transformers models of GPT-2 (Conv1D layers, a module to save), Llama (all-linear, tied head) and
// Qwen2 (biases, rsLoRA, rank and alpha patterns, the head to save), merged into the base that
// transformers saved, give the logits of PEFT's merge_and_unload; and bad adapters are refused whole.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>

#include "llmtrain/core/fs.h"
#include "llmtrain/io/hf_model.h"
#include "llmtrain/io/safetensors.h"
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
