// A run folder stands on its own: it and each checkpoint carry the tokenizer (copied in, named by a path
// relative to the folder, checked by its SHA-256), so a folder moved anywhere still generates,
// fine-tunes and converts; exported Hugging Face folders carry the tokenizer and the right special ids
// for transformers; resuming refuses changed keys that break exactness; a step's time is its own.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <random>

#include "llmtrain/core/fs.h"
#include "llmtrain/data/shard.h"
#include "llmtrain/infer/generate.h"
#include "llmtrain/tokenizer/sentencepiece.h"
#include "llmtrain/train/trainer.h"
#include "process.h"
#include "test_util.h"
#include "train/run_folder.h"

namespace lt = llmtrain::testing;
namespace fs = llmtrain::fs;
using llmtrain::testing::expect_error;
using llmtrain::testing::RunFolder;
using llmtrain::train::StepRecord;
using llmtrain::train::Trainer;
using ::testing::HasSubstr;

namespace {

// A SentencePiece model trained on made-up sentences, as the demo trains its own.
std::string train_sp(const std::string& dir, int64_t vocab = 330) {
  const std::vector<std::string> words = {"the",      "model", "learns", "tokens", "from", "text", "and",  "data",
                                          "training", "runs",  "fast",   "on",     "a",    "step", "loss", "falls"};
  std::mt19937 rng(3);
  std::ofstream corpus(dir + "/corpus.txt");
  for (int l = 0; l < 2000; ++l) {
    for (int i = 0, n = 4 + int(rng() % 8); i < n; ++i) corpus << (i ? " " : "") << words[rng() % words.size()];
    corpus << ".\n";
  }
  corpus.close();
  llmtrain::tokenizer::SentencePieceTrainOptions o;
  o.inputs = {dir + "/corpus.txt"};
  o.model_prefix = dir + "/sp";
  o.vocab_size = vocab;
  llmtrain::tokenizer::train_sentencepiece(o);
  return dir + "/sp.model";
}

lt::Outcome run_bin(std::vector<std::string> argv, const std::string& cwd) {
  argv[0] = std::string(LLMTRAIN_TEST_BIN_DIR) + "/" + argv[0];
  return lt::run({std::move(argv), {}, "", cwd, 120});
}

std::string peer(const std::vector<std::string>& args) {
  std::string cmd = "'" + lt::test_python() + "' '" + lt::test_source_dir() + "/tests/python/hf_tokenizer_peer.py'";
  for (const auto& a : args) cmd += " '" + a + "'";
  return cmd;
}

}  // namespace

TEST(RunFolder, AMovedRunGeneratesFineTunesAndConvertsWithItsOwnTokenizer) {
  RunFolder run;
  const std::string model = train_sp(run.dir.path);
  {  // shards of the corpus in this tokenizer's ids, for a model of its vocabulary
    const auto sp = llmtrain::tokenizer::load_tokenizer("sentencepiece", model);
    const auto ids = sp->encode(fs::read_file(run.dir.path + "/corpus.txt"));
    llmtrain::data::write_shard(run.dir.path + "/sp_000000.bin", ids, 330);
  }
  const std::string shards = "data.train=" + run.dir.path + "/sp_*.bin", val = "data.val=" + run.dir.path + "/sp_*.bin";
  {
    Trainer t(run.config("run", {"tokenizer.kind=sentencepiece", "tokenizer.path=" + model, "train.max_steps=5",
                                 "model.vocab_size=330", shards, val}));
    t.run();
  }
  // The folder goes elsewhere, the tokenizer it was trained with away: nothing outside it is needed.
  const std::string moved = run.dir.path + "/elsewhere/run";
  fs::make_dirs(run.dir.path + "/elsewhere");
  ASSERT_EQ(std::rename((run.dir.path + "/run").c_str(), moved.c_str()), 0);
  const std::string original = llmtrain::fs::read_file(model);
  fs::remove_tree(model);

  const auto stored = nlohmann::json::parse(fs::read_file(moved + "/config.json"));
  EXPECT_EQ(stored["tokenizer"]["path"], "tokenizer/tokenizer.model");
  const std::string ckpt = moved + "/checkpoints/step_00000005";
  EXPECT_TRUE(fs::exists(ckpt + "/tokenizer/tokenizer.model"));
  const auto own = llmtrain::train::model_tokenizer(moved);
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->path, ckpt + "/tokenizer/tokenizer.model");
  const auto tok = llmtrain::train::load_tokenizer(*own);
  const llmtrain::tokenizer::SentencePiece same("original", original);
  EXPECT_EQ(tok->encode("the model learns fast"), same.encode("the model learns fast"));
  // The run's config file reads as a config from anywhere: its tokenizer lies beside it.
  EXPECT_EQ(llmtrain::train::TrainerConfig::load(moved + "/config.json").tokenizer.path,
            moved + "/tokenizer/tokenizer.model");

  // generate with no tokenizer flag, from another working folder.
  const auto gen = run_bin(
      {"generate", "--checkpoint", moved, "--prompt", "the model", "--max-new-tokens", "5", "--device", "cpu"}, "/");
  EXPECT_TRUE(gen.exited && gen.code == 0) << gen.how() << "\n" << gen.output;
  EXPECT_THAT(gen.output, HasSubstr("the model"));

  // finetune from the moved folder: the fine-tuning run copies the same tokenizer into its own folder.
  const std::string ft_cfg = run.dir.path + "/ft.json";
  std::ofstream(ft_cfg) << nlohmann::json{{"data", {{"train", run.dir.path + "/sp_*.bin"}}},
                                          {"train", {{"batch_size", 2}, {"seq_len", 16}, {"max_steps", 2}}},
                                          {"out_dir", run.dir.path + "/ft"},
                                          {"device", "cpu"}};
  const auto cfg = llmtrain::train::finetune_config(moved, ft_cfg);
  EXPECT_EQ(cfg.tokenizer.sha256, own->sha256);
  Trainer(cfg).run();
  EXPECT_EQ(fs::read_file(run.dir.path + "/ft/tokenizer/tokenizer.model"), original);

  // convert to a Hugging Face folder carries the tokenizer.
  const auto conv = run_bin({"convert", "--from", "native", moved, "--to", "hf", run.dir.path + "/hf"}, "/");
  EXPECT_TRUE(conv.exited && conv.code == 0) << conv.how() << "\n" << conv.output;
  EXPECT_EQ(fs::read_file(run.dir.path + "/hf/tokenizer.model"), original);
  EXPECT_TRUE(fs::exists(run.dir.path + "/hf/tokenizer_config.json"));

  // A changed or missing tokenizer file is named, with the hash expected.
  fs::write_file_atomic(ckpt + "/tokenizer/tokenizer.model", original.substr(0, original.size() / 2));
  expect_error([&] { llmtrain::train::load_tokenizer(*llmtrain::train::model_tokenizer(moved)); },
               {ckpt + "/tokenizer/tokenizer.model", "have changed", "expected " + own->sha256});
  fs::remove_tree(ckpt + "/tokenizer/tokenizer.model");
  expect_error([&] { llmtrain::train::load_tokenizer(*llmtrain::train::model_tokenizer(moved)); },
               {"cannot be found", ckpt + "/tokenizer/tokenizer.model", own->sha256});
  const auto refused = run_bin({"generate", "--checkpoint", moved, "--prompt", "the", "--device", "cpu"}, "/");
  EXPECT_TRUE(refused.exited && refused.code == 1) << refused.output;
  EXPECT_THAT(refused.output, HasSubstr("tokenizer.model"));
}

// Resuming with another tokenizer, or with keys that change what the run computes, is refused before
// anything is written; keys that do not (evaluation, checkpoints) are listed and the run goes on.
TEST(RunFolder, ResumeRefusesKeysThatBreakExactness) {
  RunFolder run;
  fs::make_dirs(run.dir.path + "/other");
  const std::string model = train_sp(run.dir.path), other = train_sp(run.dir.path + "/other", 300);
  const std::vector<std::string> base = {"tokenizer.kind=sentencepiece", "tokenizer.path=" + model,
                                         "train.max_steps=10"};
  Trainer(run.config("r", base)).run();
  const auto with = [&](std::vector<std::string> changed) {  // base with some keys given other values
    for (const auto& keep : base)
      if (std::none_of(changed.begin(), changed.end(), [&](const std::string& c) {
            return c.substr(0, c.find('=')) == keep.substr(0, keep.find('='));
          }))
        changed.push_back(keep);
    return run.config("r", changed);
  };
  const std::string metrics = fs::read_file(run.dir.path + "/r/metrics.jsonl");
  expect_error([&] { llmtrain::train::run_training(with({"train.lr=5e-3"}), {.resume = true}, nullptr); },
               {"cannot resume", "train.lr: 0.001 -> 0.005"});
  expect_error([&] { llmtrain::train::run_training(with({"train.max_steps=20"}), {.resume = true}, nullptr); },
               {"train.max_steps: 10 -> 20"});
  expect_error([&] { llmtrain::train::run_training(with({"data.shuffle=false"}), {.resume = true}, nullptr); },
               {"data.shuffle: true -> false"});
  expect_error([&] { llmtrain::train::run_training(with({"tokenizer.path=" + other}), {.resume = true}, nullptr); },
               {"/r/tokenizer holds the tokenizer this run was trained with", other, "differs"});
  EXPECT_EQ(fs::read_file(run.dir.path + "/r/metrics.jsonl"), metrics);  // nothing written
  EXPECT_EQ(llmtrain::train::run_training(with({"eval.every=3", "checkpoint.keep=1"}), {.resume = true}, nullptr), 10);
}

// Exported folders as transformers reads them: AutoTokenizer gives llmtrain's ids (text with newlines
// and runs of spaces included), the special ids are the end-of-text id, and generate() stops there.
TEST(RunFolder, ExportedFoldersCarryATokenizerTransformersUses) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  lt::TempDir dir;
  const std::string sp = train_sp(dir.path);
  struct Case {
    llmtrain::train::TokenizerConfig tok;
    int64_t vocab;
    std::string cls;
  };
  for (const Case& c : {Case{{"gpt2", data + "/gpt2", ""}, 50257, "GPT2Tokenizer"},
                        Case{{"sentencepiece", sp, ""}, 330, "LlamaTokenizer"}}) {
    const auto tok = llmtrain::train::load_tokenizer(c.tok);
    const int32_t eot = *tok->eot_id();
    torch::manual_seed(1);
    llmtrain::nn::GPT2 model(llmtrain::nn::GPT2Config::preset("tiny").vocab_size(c.vocab));
    model->eval();
    const std::vector<std::string> texts = {"the model learns", "the data\nruns  fast.\n\nloss falls", "a step."};
    const auto prompt = tok->encode(texts[0]);
    {  // the end-of-text row made the best next token, so that a correct generate() stops at once
      torch::NoGradGuard no_grad;
      llmtrain::infer::SamplingOptions greedy;
      greedy.temperature = 0;
      const auto first = llmtrain::infer::generate(model, prompt, 1, greedy).back();
      const auto h =
          model->transformer(torch::tensor(std::vector<int64_t>(prompt.begin(), prompt.end())).view({1, -1}));
      const auto& wte = model->transformer->wte->weight;
      const double logit = h[0][-1].dot(wte[first]).item<double>();
      wte[eot].copy_(wte[first] * (logit > 0 ? 2.0 : 0.5));
    }
    llmtrain::infer::SamplingOptions greedy;
    greedy.temperature = 0;
    greedy.stop_tokens = {eot};
    auto ours = llmtrain::infer::generate(model, prompt, 8, greedy);
    ours.erase(ours.begin(), ours.begin() + long(prompt.size()));
    ASSERT_EQ(ours, std::vector<int32_t>{eot}) << c.tok.kind;

    const std::string out = dir.path + "/hf_" + c.tok.kind;
    llmtrain::train::save_hf_model(model.ptr(), out, {}, c.tok);
    std::ofstream(dir.path + "/texts.json") << nlohmann::json(texts).dump();
    ASSERT_EQ(std::system(peer({out, dir.path + "/texts.json", dir.path + "/peer.json"}).c_str()), 0) << c.tok.kind;
    const auto got = nlohmann::json::parse(fs::read_file(dir.path + "/peer.json"));
    EXPECT_EQ(got["tokenizer_class"].get<std::string>().rfind(c.cls, 0), 0u) << got["tokenizer_class"];
    for (size_t i = 0; i < texts.size(); ++i) {
      EXPECT_EQ(got["ids"][i].get<std::vector<int32_t>>(), tok->encode(texts[i])) << c.tok.kind << ": " << texts[i];
      EXPECT_EQ(got["decoded"][i], texts[i]) << c.tok.kind;
    }
    for (const char* key : {"bos_token_id", "eos_token_id", "config_bos", "config_eos"})
      EXPECT_EQ(got[key], eot) << c.tok.kind << " " << key;
    EXPECT_EQ(got["generated"].get<std::vector<int32_t>>(), ours) << c.tok.kind << ": generate() stops at eos";
  }
}

// A step that evaluates or checkpoints is timed as a step: its tok/s is its neighbours' (within 2x on
// the CPU), however long the evaluation (here about 40 steps' work), and so is the step after it.
TEST(RunFolder, AStepsTokensPerSecondIsItsOwn) {
  // One thread, and each step against the steps around it: ctest runs other tests on the same cores,
  // whose load moves a step's time by more than 2x over the run but little between neighbours.
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  RunFolder run;
  Trainer t(run.config("timed", {"train.max_steps=40", "eval.every=10", "eval.batches=40", "checkpoint.every=10"}));
  std::vector<double> tps;
  t.on_step([&](const StepRecord& r) { tps.push_back(r.tokens_per_s); });
  t.run();
  at::set_num_threads(threads);
  ASSERT_EQ(tps.size(), 40u);
  for (const size_t step : {10, 11, 20, 21, 30, 31}) {  // 1-based steps
    std::vector<double> around;                         // the four steps before and after the pair, none beside a pause
    for (size_t s = step - step % 10 - 4; s <= step - step % 10 + 5; ++s)
      if (s % 10 != 0 && s % 10 != 1) around.push_back(tps[s - 1]);
    std::sort(around.begin(), around.end());
    const double median = (around[3] + around[4]) / 2;
    EXPECT_GT(tps[step - 1], median / 2) << "step " << step << " against " << median;
    EXPECT_LT(tps[step - 1], median * 2) << "step " << step << " against " << median;
  }
}
