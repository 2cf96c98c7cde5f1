#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "llmtrain/core/fs.h"
#include "llmtrain/train/config.h"
#include "test_util.h"

using llmtrain::testing::expect_error;
using llmtrain::train::TrainerConfig;

namespace {
const char* kConfig = R"({
  "model": {"preset": "gpt2", "dropout": 0.0},
  "data": {"train": "data/sotu/train_*.bin", "val": "data/sotu/val_*.bin"},
  "train": {"batch_size": 16, "seq_len": 1024, "max_steps": 300, "lr": 6e-4, "warmup_steps": 30,
            "schedule": "constant", "beta2": 0.95, "weight_decay": 0.1, "grad_clip": 1.0,
            "precision": "bf16-master", "seed": 42},
  "eval": {"every": 100, "batches": 10},
  "checkpoint": {"every": 100, "keep": 3},
  "out_dir": "runs/sotu"
})";
}

TEST(TrainerConfig, ParsesSectionsAndKeepsDefaults) {
  const auto c = TrainerConfig::parse(kConfig, "test.json");
  EXPECT_EQ(c.model.spec().gpt2().n_layer(), 12);
  EXPECT_EQ(c.train.batch_size, 16);
  EXPECT_EQ(c.train.seed, 42u);
  EXPECT_EQ(c.train.precision, "bf16-master");
  EXPECT_EQ(c.checkpoint.keep, 3);
  EXPECT_EQ(c.sample.every, 0);  // default: off
  EXPECT_EQ(c.device, "auto");   // default
  EXPECT_DOUBLE_EQ(c.optimizer().schedule.at(100), 6e-4);
  EXPECT_EQ(c.optimizer().precision, llmtrain::optim::Precision::kBF16Master);
  EXPECT_TRUE(c.optimizer().stochastic_rounding);  // default
  EXPECT_EQ(c.optimizer().seed, 42u);
  // to_json writes every key; parsing it gives the same configuration.
  const auto again = TrainerConfig::parse(c.to_json(), "roundtrip");
  EXPECT_EQ(again.to_json(), c.to_json());
}

TEST(TrainerConfig, OverridesApplyBeforeChecks) {
  const auto c = TrainerConfig::parse(
      kConfig, "test.json",
      {"train.lr=3e-4", "data.train=other/train_*.bin", "sample.prompt=Hello there", "model.n_layer=6", "device=cpu"});
  EXPECT_DOUBLE_EQ(c.train.lr, 3e-4);
  EXPECT_EQ(c.data.train, "other/train_*.bin");
  EXPECT_EQ(c.sample.prompt, "Hello there");
  EXPECT_EQ(c.model.spec().gpt2().n_layer(), 6);
  EXPECT_EQ(c.device, "cpu");
}

TEST(TrainerConfig, BadInputNamesTheKeyAndTheSource) {
  expect_error([] { TrainerConfig::parse("{\"train\": {", "broken.json"); }, {"broken.json", "not valid JSON"});
  expect_error([] { TrainerConfig::parse(R"({"train": {"lrr": 1}})", "a.json"); },
               {"a.json", "unknown key \"train.lrr\""});
  expect_error([] { TrainerConfig::parse(R"({"trian": {}})", "a.json"); }, {"unknown section \"trian\""});
  expect_error([] { TrainerConfig::parse(R"({"speed": 3})", "a.json"); }, {"unknown key \"speed\""});
  expect_error([] { TrainerConfig::parse(R"({"train": 3})", "a.json"); }, {"train must be an object"});
  expect_error([] { TrainerConfig::parse(R"({"train": {"lr": "fast"}})", "a.json"); },
               {"train.lr must be a number", "\"fast\""});
  expect_error([] { TrainerConfig::parse(R"({"train": {"batch_size": 2.5}})", "a.json"); },
               {"train.batch_size must be an integer"});
  expect_error([] { TrainerConfig::parse(R"({"train": {"seed": -1}})", "a.json"); },
               {"train.seed must be a non-negative integer"});
  expect_error([] { TrainerConfig::parse(R"({"train": {"batch_size": 0}})", "a.json"); },
               {"train.batch_size must be at least 1"});
  expect_error([] { TrainerConfig::parse(R"({"train": {"precision": "int8"}})", "a.json"); },
               {"a.json", "precision \"int8\""});
  expect_error([] { TrainerConfig::parse(R"({"train": {"schedule": "step"}})", "a.json"); }, {"schedule \"step\""});
  expect_error([] { TrainerConfig::parse(R"({"train": {"rounding": "up"}})", "a.json"); },
               {"a.json", "train.rounding must be stochastic or nearest", "\"up\""});
  expect_error([] { TrainerConfig::parse(R"({"model": {"preset": "gpt5"}})", "a.json"); }, {"unknown preset \"gpt5\""});
  expect_error([] { TrainerConfig::parse(R"({"train": {"seq_len": 4096}, "model": {"preset": "gpt2"}})", "a.json"); },
               {"train.seq_len 4096 exceeds the model's block_size 1024"});
  expect_error([] { TrainerConfig::parse("{}", "a.json", {"train.speed=3"}); }, {"--set train.speed=3", "unknown key"});
  expect_error([] { TrainerConfig::parse("{}", "a.json", {"train.lr"}); }, {"--set train.lr", "key=value"});
  expect_error([] { TrainerConfig::parse("{}", "a.json", {"device=tpu"}); }, {"device must be auto, cpu or cuda"});
  // A bare word that is no UTF-8 (found by fuzz_config: it broke writing the config back as JSON).
  expect_error([] { TrainerConfig::parse("{}", "a.json", {"data.val=3e-4\xff\xc1"}); },
               {"--set data.val: the value is not valid UTF-8 (byte 4)"});
  expect_error([] { TrainerConfig::load("/nonexistent/config.json"); }, {"/nonexistent/config.json"});
}

// The keys that choose among words are read once into their enums: compared, switched on and written
// back by name; a word of none of them, or a value that is no word, lists the words.
TEST(TrainerConfig, ChoicesAreEnumsReadOnceAndWrittenBackByName) {
  const auto c = TrainerConfig::parse(
      R"({"train": {"precision": "fp16", "schedule": "wsd", "rounding": "nearest"},
          "data": {"format": "shards", "shuffle_unit": "batch"}, "device": "cpu"})",
      "a.json");
  EXPECT_EQ(c.train.precision.value(), llmtrain::optim::Precision::kFP16);
  EXPECT_EQ(c.train.schedule.value(), llmtrain::optim::ScheduleKind::kWSD);
  EXPECT_EQ(c.train.rounding.value(), llmtrain::optim::Rounding::kNearest);
  EXPECT_EQ(c.data.format.value(), llmtrain::train::DataFormat::kShards);
  EXPECT_EQ(c.data.shuffle_unit.value(), llmtrain::data::ShuffleUnit::kBatch);
  EXPECT_EQ(c.device.value(), llmtrain::train::DeviceChoice::kCpu);
  EXPECT_FALSE(c.optimizer().stochastic_rounding);
  const auto again = TrainerConfig::parse(c.to_json(), "written");
  EXPECT_EQ(again.to_json(), c.to_json());
  EXPECT_EQ(again.train.precision, "fp16");
  EXPECT_EQ(again.data.shuffle_unit, "batch");
  expect_error([] { TrainerConfig::parse(R"({"train": {"precision": 16}})", "a.json"); },
               {"a.json: train.precision must be fp32, bf16, fp16 or bf16-master", "precision 16 is none of them"});
  expect_error([] { TrainerConfig::parse("{}", "a.json", {"data.format=csv"}); },
               {"--set data.format=csv: data.format must be auto, shards or sft", "format \"csv\""});
}

// A value that came from --set is named as --set in its error, not as the file's; a key given twice
// (in the file, or by two --set) is refused rather than one of its values silently lost.
TEST(TrainerConfig, ErrorsNameWhereTheValueCameFrom) {
  expect_error([] { TrainerConfig::parse(R"({"train": {"lr": 1e-3}})", "a.json", {"train.lr=fast"}); },
               {"--set train.lr=fast: train.lr must be a number"});
  expect_error([] { TrainerConfig::parse("{}", "a.json", {"train.batch_size=0"}); },
               {"--set train.batch_size=0: train.batch_size must be at least 1"});
  expect_error([] { TrainerConfig::parse("{}", "a.json", {"device=tpu"}); }, {"--set device=tpu: device must be"});
  expect_error([] { TrainerConfig::parse(R"({"device": "tpu"})", "a.json"); }, {"a.json: device must be"});
  expect_error([] { TrainerConfig::parse(R"({"train": {"lr": 1e-3, "lr": 2e-3}})", "a.json"); },
               {"a.json", "\"train.lr\" is given twice"});
  expect_error(
      [] {
        TrainerConfig::parse("{}", "a.json", {"train.lr=1", "train.lr=2"});
      },
      {"--set train.lr=2", "already set by --set train.lr=1"});
}

// The key reference is made from the table the parser reads, and docs/CONFIG.md holds it as it is.
TEST(TrainerConfig, TheReferenceListsEveryKeyAndDocsHoldIt) {
  const std::string reference = TrainerConfig::reference();
  const std::string doc = llmtrain::fs::read_file(llmtrain::testing::test_source_dir() + "/docs/CONFIG.md");
  const auto all = nlohmann::json::parse(TrainerConfig().to_json());
  size_t keys = 0;
  for (const auto& [section, value] : all.items()) {
    if (value.is_object()) {
      for (const auto& [leaf, v] : value.items()) {
        EXPECT_NE(reference.find("| `" + section + "." + leaf + "` |"), std::string::npos) << section << "." << leaf;
        ++keys;
      }
    } else {
      EXPECT_NE(reference.find("| `" + section + "` |"), std::string::npos) << section;
      ++keys;
    }
  }
  EXPECT_EQ(keys, TrainerConfig::keys().size());
  EXPECT_NE(doc.find(reference), std::string::npos) << "docs/CONFIG.md is out of date: regenerate it with "
                                                       "build/bin/train --print-reference";
}

TEST(TrainerConfig, DataFormatTokenizerAndSampling) {
  const auto sft = TrainerConfig::parse(
      R"({"data": {"train": "sft/train.jsonl", "pack": true}, "tokenizer": {"kind": "gpt2"}, "sample": {"every": 50}})",
      "a.json");
  EXPECT_TRUE(sft.sft());
  EXPECT_TRUE(sft.data.pack);
  EXPECT_TRUE(sft.data.shuffle);  // default
  EXPECT_FALSE(TrainerConfig::parse(R"({"data": {"shuffle": false}})", "a.json").data.shuffle);
  EXPECT_EQ(sft.data.shuffle_unit, "window");  // default
  EXPECT_EQ(TrainerConfig::parse(R"({"data": {"shuffle_unit": "batch"}})", "a.json").data.shuffle_unit, "batch");
  expect_error([] { TrainerConfig::parse(R"({"data": {"shuffle_unit": "token"}})", "a.json"); },
               {"a.json", "data.shuffle_unit", "window or batch", "token"});
  EXPECT_FALSE(TrainerConfig::parse(R"({"data": {"train": "shards/train_*.bin"}})", "a.json").sft());
  EXPECT_TRUE(
      TrainerConfig::parse(R"({"data": {"train": "x.txt", "format": "sft"}, "tokenizer": {"kind": "gpt2"}})", "a.json")
          .sft());
  expect_error([] { TrainerConfig::parse(R"({"data": {"train": "t.jsonl"}})", "a.json"); },
               {"a.json", "data.train t.jsonl is SFT JSONL, which needs tokenizer.kind"});
  expect_error([] { TrainerConfig::parse(R"({"data": {"format": "csv"}})", "a.json"); },
               {"data.format must be auto, shards or sft"});
  expect_error([] { TrainerConfig::parse(R"({"data": {"pack": 1}})", "a.json"); }, {"data.pack must be true or false"});
  expect_error([] { TrainerConfig::parse(R"({"tokenizer": {"kind": "bpe"}})", "a.json"); },
               {"tokenizer.kind must be gpt2, sentencepiece or hf"});
  expect_error([] { TrainerConfig::parse(R"({"sample": {"every": 10}})", "a.json"); },
               {"sample.every > 0 needs tokenizer.kind"});
  expect_error([] { TrainerConfig::parse(R"({"sample": {"temperature": -1}})", "a.json"); },
               {"sample.temperature must be >= 0"});
}

// The GPT-2 124M reference run (scripts/gpu_check.sh converge) is llm.c's convergence reference of
// ../shared/ENVIRONMENT.md, key by key: its figures are compared with llm.c's only while this holds.
TEST(TrainerConfig, TheReferenceRunIsLlmcsReference) {
  const auto c = TrainerConfig::load(llmtrain::testing::test_source_dir() + "/examples/configs/sotu_gpt2_124m.json");
  const auto m = c.model.spec().gpt2();
  EXPECT_EQ(m.n_layer(), 12);
  EXPECT_EQ(m.n_head(), 12);
  EXPECT_EQ(m.n_embd(), 768);
  EXPECT_EQ(m.vocab_size(), 50257);
  EXPECT_EQ(m.block_size(), 1024);
  EXPECT_EQ(c.train.batch_size, 16);
  EXPECT_EQ(c.train.seq_len, 1024);
  EXPECT_EQ(c.train.total_batch_tokens, 16 * 1024);  // one micro-step a step, as llm.c's -b 16 -t 1024
  EXPECT_EQ(c.train.max_steps, 300);
  EXPECT_EQ(c.train.lr, 6e-4);
  EXPECT_EQ(c.train.warmup_steps, 30);
  EXPECT_EQ(c.train.schedule, "constant");
  EXPECT_EQ(c.train.beta1, 0.9);
  EXPECT_EQ(c.train.beta2, 0.95);
  EXPECT_EQ(c.train.weight_decay, 0.1);
  EXPECT_EQ(c.train.grad_clip, 1.0);
  EXPECT_EQ(c.train.precision, "bf16-master");  // llm.c: bf16 weights, fp32 master copies
  EXPECT_EQ(c.eval.every, 100);
  EXPECT_EQ(c.data.train, "data/sotu/train_*.bin");  // gpu_check.sh's shards of ../shared/data's split
  EXPECT_EQ(c.data.val, "data/sotu/val_*.bin");
}

TEST(TrainerConfig, TheExampleConfigsParse) {
  const std::string dir = llmtrain::testing::test_source_dir() + "/examples/configs/";
  for (const char* name : {"sotu_gpt2_124m.json", "sotu_tiny_cpu.json", "demo_cpu.json", "demo_gpu.json"})
    EXPECT_NO_THROW(TrainerConfig::load(dir + name)) << name;
  // A fine-tuning config gets its model and tokenizer from the checkpoint (finetune_config).
  const auto ft = TrainerConfig::load(dir + "finetune_sft.json", {"tokenizer.kind=gpt2"});
  EXPECT_TRUE(ft.sft());
  const auto demo = TrainerConfig::load(dir + "demo_cpu.json");
  EXPECT_EQ(demo.model.spec().gpt2().vocab_size(), 4096);  // the demo's SentencePiece vocabulary
}

// The peft section: LoRA's keys become PEFT's adapter config, with PEFT's default targets per family,
// and bad values are named.
TEST(TrainerConfig, PeftKeysDescribeTheAdapter) {
  const auto none = TrainerConfig::parse("{}", "a.json");
  EXPECT_EQ(none.peft.method, llmtrain::train::PeftMethod::kNone);
  const auto lora = TrainerConfig::parse(
      R"({"peft": {"method": "lora", "r": 16, "alpha": 32, "use_rslora": true, "rank_pattern": {"down_proj": 4}}})",
      "a.json");
  const auto gpt2 = lora.peft.lora(lora.model.spec());
  EXPECT_EQ(gpt2.target_modules, std::vector<std::string>{"c_attn"});
  EXPECT_EQ(gpt2.r, 16);
  EXPECT_DOUBLE_EQ(gpt2.scaling_of("x.q_proj"), 32 / 4.0);
  EXPECT_EQ(gpt2.rank_of("model.layers.0.mlp.down_proj"), 4);
  const auto llama = lora.peft.lora(llmtrain::nn::ModelSpec::preset("llama-tiny"));
  EXPECT_EQ(llama.target_modules, (std::vector<std::string>{"q_proj", "v_proj"}));
  const auto all = TrainerConfig::parse("{}", "a.json", {"peft.method=lora", R"(peft.target_modules=["all-linear"])"});
  EXPECT_TRUE(all.peft.lora(all.model.spec()).all_linear);
  const auto bad = [](const std::vector<std::string>& sets, const std::string& message) {
    expect_error([&] { TrainerConfig::parse("{}", "a.json", sets); }, {message});
  };
  bad({"peft.method=dora"}, "peft.method must be none, lora or qlora: method \"dora\" is none of them");
  bad({"peft.method=lora", "peft.r=0"}, "peft.r must be at least 1, got 0");
  bad({"peft.method=lora", "peft.dropout=1"}, "peft.dropout must lie in [0, 1), got 1");
  bad({"peft.method=lora", "peft.target_regex=.*q", R"(peft.target_modules=["v_proj"])"},
      "peft.target_regex and peft.target_modules are two ways to say the same: set one");
  bad({"peft.method=lora", "peft.target_regex=(["}, "peft.target_regex \"([\" is not a regular expression");
  bad({"peft.method=lora", R"(peft.rank_pattern={"q_proj": 2.5})"}, "peft.rank_pattern: q_proj must map to an integer");
  bad({"peft.target_modules=q_proj"}, "peft.target_modules must be a list of strings, got \"q_proj\"");
}
