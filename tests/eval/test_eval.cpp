// Evaluation against transformers itself (tests/python/eval_peer.py scores the same exported folder
// one sequence at a time in float64): per-choice log-likelihoods, the choice each rule picks, the
// truncated contexts, and the sliding-window perplexity of text files and shards, for GPT-2 and the
// Llama family; the windows score each id once; bad files are named by line or counted and skipped;
// the evaluate program prints its JSON line.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <stdexcept>

#include "llmtrain/data/shard.h"
#include "llmtrain/eval/tasks.h"
#include "llmtrain/nn/causal_lm.h"
#include "llmtrain/peft/lora.h"
#include "llmtrain/train/config.h"
#include "llmtrain/train/model_files.h"
#include "llmtrain/train/trainer.h"
#include "programs/programs.h"
#include "test_util.h"
#include "train/run_folder.h"

using llmtrain::testing::expect_error;
using llmtrain::testing::TempDir;
namespace eval = llmtrain::eval;

namespace {

void write(const std::string& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }

nlohmann::json peer(const std::vector<std::string>& args, const std::string& out) {
  std::string cmd = "'" + llmtrain::testing::test_python() + "' '" + llmtrain::testing::test_source_dir() +
                    "/tests/python/eval_peer.py'";
  for (const auto& a : args) cmd += " '" + a + "'";
  EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
  return out.empty() ? nlohmann::json() : nlohmann::json::parse(std::ifstream(out));
}

// Sentences of the State of the Union corpus, for contexts and endings.
std::vector<std::string> sentences(const std::string& data) {
  std::vector<std::string> out;
  for (const auto& file : llmtrain::testing::sotu_files(data)) {
    const std::string text = llmtrain::fs::read_file(file);
    size_t start = 0;
    for (size_t dot; (dot = text.find(". ", start)) != std::string::npos && out.size() < 80; start = dot + 2) {
      std::string s = text.substr(start, dot + 1 - start);
      std::replace(s.begin(), s.end(), '\n', ' ');
      const bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return c > 0; });  // cut anywhere safely
      if (s.size() > 20 && ascii) out.push_back(s);
    }
  }
  if (out.size() != 80)  // the callers index up to 79: fail the test here rather than crash the binary
    throw std::runtime_error("80 sentences wanted from " + data + "/sotu, found " + std::to_string(out.size()));
  return out;
}

// A HellaSwag file: contexts from sentences (one very long, one ending in a space, one label a
// string), four endings each, one with a character outside ASCII.
std::string hellaswag_file(const std::string& dir, const std::vector<std::string>& s) {
  std::mt19937 rng(3);
  std::string out;
  for (int i = 0; i < 12; ++i) {
    std::string ctx = s[size_t(i)].substr(0, s[size_t(i)].size() / 2);
    if (i == 4) ctx += " ";
    if (i == 7)
      for (int k = 0; k < 8; ++k) ctx += " " + s[size_t(30 + k)];
    nlohmann::json endings = nlohmann::json::array();
    for (int e = 0; e < 4; ++e) {
      const std::string& src = s[size_t(40 + (i * 4 + e) % 36)];
      endings.push_back(src.substr(src.size() / 3, 12 + (i + e) % 9 * 5) + (i == 2 && e == 1 ? " café" : ""));
    }
    nlohmann::json label = int(rng() % 4);
    if (i == 5) label = std::to_string(label.get<int>());
    out += nlohmann::json{{"ctx", ctx}, {"endings", endings}, {"label", label}}.dump() + "\n";
  }
  write(dir + "/hs.jsonl", out);
  return dir + "/hs.jsonl";
}

// The generic form: an empty context, choices written with their spaces.
std::string choice_file(const std::string& dir, const std::vector<std::string>& s) {
  std::string out;
  for (int i = 0; i < 6; ++i) {
    const std::string ctx = i == 0 ? "" : s[size_t(10 + i)];
    nlohmann::json choices = {" " + s[size_t(20 + i)].substr(0, 30), " " + s[size_t(50 + i)].substr(0, 18), " yes"};
    out += nlohmann::json{{"context", ctx}, {"choices", choices}, {"label", i % 3}}.dump() + "\n\n";
  }
  write(dir + "/choice.jsonl", out);
  return dir + "/choice.jsonl";
}

llmtrain::train::TokenizerConfig gpt2_tokenizer(const std::string& data) { return {"gpt2", data + "/gpt2", ""}; }

// A tiny random GPT-2 (128 positions), exported with GPT-2's tokenizer as transformers reads it.
std::shared_ptr<llmtrain::nn::CausalLM> tiny_gpt2(const std::string& dir, const std::string& data) {
  torch::manual_seed(7);
  auto model = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset("tiny"));
  llmtrain::train::save_hf_model(model, dir, {}, gpt2_tokenizer(data));
  return model;
}

// Our choices' scores against the peer's, for `file` of `kind` with inputs starting at `bos` (-1: none).
void expect_choices_match(llmtrain::nn::CausalLM& model, const std::string& folder, const std::string& file,
                          const std::string& kind, int32_t bos, const llmtrain::tokenizer::Tokenizer& tok,
                          int64_t batch, int64_t min_truncated) {
  const std::optional<int32_t> start = bos >= 0 ? std::optional<int32_t>(bos) : std::nullopt;
  int64_t skipped = -1;
  const auto examples =
      eval::read_choice_examples(file, kind == "hellaswag", tok, start, model.block_size(), 0, false, &skipped);
  EXPECT_EQ(skipped, 0);
  const auto ours = eval::score_choices(model, examples, batch);
  const auto ref =
      peer({"choice", folder, file, kind, std::to_string(bos), folder + "/../ref.json"}, folder + "/../ref.json");
  ASSERT_EQ(ref["loglikelihood"].size(), examples.size());
  int64_t truncated = 0;
  for (size_t e = 0; e < examples.size(); ++e) {
    truncated += examples[e].truncated;
    ASSERT_EQ(ref["loglikelihood"][e].size(), examples[e].choices.size());
    for (size_t c = 0; c < examples[e].choices.size(); ++c)
      EXPECT_NEAR(ours.loglikelihood[e][c], ref["loglikelihood"][e][c].get<double>(), 1e-4)
          << kind << " example " << e << " choice " << c;
    EXPECT_EQ(ours.pred_acc[e], ref["pred_acc"][e].get<int64_t>()) << e;
    EXPECT_EQ(ours.pred_norm[e], ref["pred_norm"][e].get<int64_t>()) << e;
    EXPECT_EQ(ours.pred_token[e], ref["pred_token"][e].get<int64_t>()) << e;
  }
  EXPECT_EQ(truncated, ref["truncated"].get<int64_t>());
  EXPECT_GE(truncated, min_truncated);
}

// The peer's perplexity of `files` against ours, and the Task's scores from them.
void expect_perplexity_matches(llmtrain::nn::CausalLM& model, const std::string& folder,
                               const std::vector<std::string>& files, int64_t window, int64_t stride, int32_t bos,
                               const llmtrain::tokenizer::Tokenizer& tok) {
  std::vector<std::string> args = {"perplexity",           folder,
                                   std::to_string(window), std::to_string(stride),
                                   std::to_string(bos),    folder + "/../ppl.json"};
  args.insert(args.end(), files.begin(), files.end());
  const auto ref = peer(args, folder + "/../ppl.json");
  eval::TaskConfig c;
  c.task = "perplexity";
  c.data = files;
  c.window = window;
  c.stride = stride;
  c.batch = 3;
  const std::optional<int32_t> start = bos >= 0 ? std::optional<int32_t>(bos) : std::nullopt;
  const eval::Task task(c, tok, start, model.block_size());
  const auto tally = task.run(model);
  ASSERT_EQ(tally.size(), 3u);
  EXPECT_EQ(int64_t(tally[0]), ref["scored"].get<int64_t>());
  EXPECT_NEAR(tally[1], ref["nll"].get<double>(), 1e-6 * tally[0]) << "summed nats";
  const auto r = task.result(tally);
  const double mean = ref["nll"].get<double>() / ref["scored"].get<double>();
  EXPECT_EQ(r.scores[0].name, "ppl");
  EXPECT_NEAR(r.scores[0].value, std::exp(mean), 1e-5 * std::exp(mean));
  EXPECT_EQ(r.scores[1].name, "bits_per_byte");
  EXPECT_NEAR(r.scores[1].value, ref["nll"].get<double>() / std::log(2.0) / ref["bytes"].get<double>(), 1e-6);
  EXPECT_GT(r.scores[0].stderr_, 0);
}

}  // namespace

TEST(Eval, GPT2ChoicesAreTransformersWithItsTokenizer) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  TempDir t;
  auto model = tiny_gpt2(t.path + "/hf", data);
  const auto tok = llmtrain::train::load_tokenizer(gpt2_tokenizer(data));
  const auto s = sentences(data);
  // The long context (example 7) passes GPT-2 tiny's 128 positions; batches of 5 examples pad unevenly.
  expect_choices_match(*model, t.path + "/hf", hellaswag_file(t.path, s), "hellaswag", -1, *tok, 5, 1);
  expect_choices_match(*model, t.path + "/hf", choice_file(t.path, s), "choice", -1, *tok, 4, 0);
}

TEST(Eval, LlamaFamilyChoicesAndPerplexityAreTransformers) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  TempDir t;
  peer({"make-llama", t.path + "/made"}, "");
  // Ours exported again, with GPT-2's tokenizer beside it; its end-of-text stands in for the bos.
  auto model = llmtrain::train::load_model(t.path + "/made");
  llmtrain::train::save_hf_model(model, t.path + "/hf", {}, gpt2_tokenizer(data));
  const auto tok = llmtrain::train::load_tokenizer(gpt2_tokenizer(data));
  const auto s = sentences(data);
  const int32_t bos = *tok->eot_id();
  // 64 positions: the long context loses its left, maybe others too.
  expect_choices_match(*model, t.path + "/hf", hellaswag_file(t.path, s), "hellaswag", bos, *tok, 12, 1);
  std::string text;
  for (int i = 0; i < 20; ++i) text += s[size_t(i)] + " ";
  write(t.path + "/a.txt", text);
  expect_perplexity_matches(*model, t.path + "/hf", {t.path + "/a.txt"}, 64, 24, bos, *tok);
}

TEST(Eval, GPT2PerplexityOfTextAndShardsIsTheSlidingWindowRecipe) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  TempDir t;
  auto model = tiny_gpt2(t.path + "/hf", data);
  const auto tok = llmtrain::train::load_tokenizer(gpt2_tokenizer(data));
  const auto s = sentences(data);
  std::string a, b;
  for (int i = 0; i < 25; ++i) a += s[size_t(i)] + (i % 5 == 4 ? "\n\n" : " ");
  for (int i = 25; i < 33; ++i) b += s[size_t(i)] + " naïve ";
  write(t.path + "/a.txt", a);
  write(t.path + "/b.txt", b);
  // A shard as prepare_data writes one: each document after an end-of-text.
  std::vector<int32_t> ids;
  for (int i = 40; i < 60; ++i) {
    ids.push_back(*tok->eot_id());
    const auto doc = tok->encode(s[size_t(i)]);
    ids.insert(ids.end(), doc.begin(), doc.end());
  }
  llmtrain::data::write_shard(t.path + "/val_000000.bin", ids, tok->vocab_size());
  const std::vector<std::string> files = {t.path + "/a.txt", t.path + "/b.txt", t.path + "/val_000000.bin"};
  expect_perplexity_matches(*model, t.path + "/hf", files, 48, 20, -1, *tok);
  expect_perplexity_matches(*model, t.path + "/hf", files, 128, 64, -1, *tok);  // the defaults' window and stride
  expect_perplexity_matches(*model, t.path + "/hf", files, 40, 40, -1, *tok);   // windows side by side
}

TEST(Eval, SlidingWindowsScoreEachIdOnceAsTheRecipeDoes) {
  for (int64_t length : {2, 5, 64, 100, 257})
    for (int64_t window : {2, 7, 64})
      for (int64_t stride : {1, 3, 7, 64}) {
        if (stride > window) continue;
        std::vector<int> times(size_t(length), 0);
        int64_t prev_end = 0;
        for (const auto& w : eval::sliding_windows(length, window, stride)) {
          ASSERT_LE(w.end - w.begin, window);
          ASSERT_LT(w.scored, w.end - w.begin);  // the window's first id is context only
          ASSERT_GE(w.end, prev_end);
          for (int64_t i = w.end - w.scored; i < w.end; ++i) ++times[size_t(i)];
          prev_end = w.end;
        }
        // Every id once but the first; windows side by side (the recipe's stride = window) leave each
        // window's first id unscored, as the recipe does.
        for (int64_t i = 0; i < length; ++i)
          ASSERT_EQ(times[size_t(i)], i == 0 || (stride == window && i % window == 0) ? 0 : 1)
              << "id " << i << " of " << length << ", window " << window << " stride " << stride;
      }
  expect_error([] { eval::sliding_windows(10, 4, 5); }, {"stride must be within [1, window = 4]", "got 5"});
}

TEST(Eval, BadFilesAreNamedByLineOrCountedAndSkipped) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  TempDir t;
  const auto tok = llmtrain::train::load_tokenizer(gpt2_tokenizer(data));
  const std::string good = R"({"ctx": "The cat", "endings": ["sat", "ran"], "label": 1})";
  const auto read = [&](const std::string& text, bool skip, int64_t* skipped = nullptr, int64_t block = 1024) {
    write(t.path + "/x.jsonl", text);
    return eval::read_choice_examples(t.path + "/x.jsonl", true, *tok, std::nullopt, block, 0, skip, skipped);
  };
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"{not json", "not valid JSON"},
      {R"([1, 2])", "not a JSON object"},
      {R"({"endings": ["a", "b"], "label": 0})", "expected a string field \"ctx\""},
      {R"({"ctx": "x", "endings": ["only one"], "label": 0})", "a list of two or more strings"},
      {R"({"ctx": "x", "endings": ["a", 3], "label": 0})", "a list of two or more strings"},
      {R"({"ctx": "x", "endings": ["a", "b"], "label": 2})", "an index into the 2 choices, got 2"},
      {R"({"ctx": "x", "endings": ["a", "b"], "label": -1})", "got -1"},
      {R"({"ctx": "x", "endings": ["a", "b"]})", "got none"},
      {R"({"ctx": "x", "endings": ["a", ""], "label": 0})", "a choice is empty"},
  };
  for (const auto& [line, what] : bad) {
    SCOPED_TRACE(line);
    expect_error([&] { read(good + "\n" + line + "\n" + good + "\n", false); }, {"x.jsonl:2", what});
    int64_t skipped = 0;
    EXPECT_EQ(read(good + "\n" + line + "\n" + good + "\n", true, &skipped).size(), 2u) << line;
    EXPECT_EQ(skipped, 1) << line;
  }
  expect_error([&] { read("", false); }, {"x.jsonl", "no examples"});
  expect_error([&] { read("\n\n", false); }, {"x.jsonl", "no examples"});
  const std::string long_choice = R"({"ctx": "The cat", "endings": ["sat on the mat by the door of the old house", )"
                                  R"("ran"], "label": 1})";
  expect_error([&] { read(long_choice, false, nullptr, 8); }, {"x.jsonl:1", "does not fit the model's window of 8"});
  expect_error([&] { eval::read_documents({t.path + "/none.txt"}, *tok, std::nullopt); }, {"none.txt"});
  write(t.path + "/empty.txt", "");
  expect_error([&] { eval::read_documents({t.path + "/empty.txt"}, *tok, std::nullopt); }, {"empty.txt is empty"});
  // A task's options are checked before any file is read.
  eval::TaskConfig c;
  c.task = "squad";
  c.data = {t.path + "/x.jsonl"};
  expect_error([&] { eval::Task(c, *tok, std::nullopt, 128); },
               {"task must be hellaswag, choice or perplexity", "squad"});
  c.task = "perplexity";
  c.window = 200;
  expect_error([&] { eval::Task(c, *tok, std::nullopt, 128); }, {"window must be within [2, 128]", "got 200"});
  c.window = 0;
  c.stride = 200;
  expect_error([&] { eval::Task(c, *tok, std::nullopt, 128); }, {"stride must be within [1, window = 128]"});
}

TEST(Eval, EvaluateProgramPrintsItsScoresAsAJsonLine) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  TempDir t;
  tiny_gpt2(t.path + "/hf", data);
  const std::string file = hellaswag_file(t.path, sentences(data));
  using llmtrain::testing::programs::run;
  const auto o = run({"evaluate", "--checkpoint", t.path + "/hf", "--task", "hellaswag", "--data", file, "--limit",
                      "10", "--batch", "4", "--device", "cpu"});
  llmtrain::testing::programs::expect_ok(o, "evaluate");
  const std::string out = o.output.substr(0, o.output.find_last_not_of('\n') + 1);
  const auto j = nlohmann::json::parse(out.substr(out.rfind('\n') + 1));
  EXPECT_EQ(j["task"], "hellaswag");
  EXPECT_EQ(j["examples"], 10);
  EXPECT_GE(j["truncated"].get<int64_t>(), 1);
  for (const char* k : {"acc", "acc_norm", "acc_token"}) {
    EXPECT_GE(j[k].get<double>(), 0.0) << k;
    EXPECT_LE(j[k].get<double>(), 1.0) << k;
    EXPECT_GT(j[std::string(k) + "_stderr"].get<double>(), 0.0) << k;
  }
  EXPECT_THAT(o.output, ::testing::HasSubstr("hellaswag: acc_norm "));
  // A PEFT adapter is merged first: the perplexity of the merged model, not the base's.
  auto model = llmtrain::train::load_model(t.path + "/hf");
  llmtrain::peft::LoraConfig lora;
  lora.all_linear = true;
  lora.init = llmtrain::peft::LoraInit::kRandom;  // B not zero: the adapter changes the model
  torch::manual_seed(3);
  llmtrain::peft::add_lora(*model, lora);
  llmtrain::peft::save_lora(*model, lora, t.path + "/adapter");
  llmtrain::peft::merge_lora(*model);
  std::string text;
  for (const auto& s : sentences(data)) text += s + " ";
  write(t.path + "/a.txt", text);
  const auto ppl_of = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> args = {"evaluate", "--checkpoint",    t.path + "/hf", "--task", "perplexity",
                                     "--data",   t.path + "/a.txt", "--device",     "cpu"};
    args.insert(args.end(), extra.begin(), extra.end());
    const auto p = run(args);
    llmtrain::testing::programs::expect_ok(p, "evaluate --task perplexity");
    const std::string last = p.output.substr(0, p.output.find_last_not_of('\n') + 1);
    return nlohmann::json::parse(last.substr(last.rfind('\n') + 1))["ppl"].get<double>();
  };
  eval::TaskConfig c;
  c.task = "perplexity";
  c.data = {t.path + "/a.txt"};
  const auto tok = llmtrain::train::load_tokenizer(gpt2_tokenizer(data));
  const eval::Task task(c, *tok, std::nullopt, model->block_size());
  const double merged = task.result(task.run(*model)).scores[0].value;
  EXPECT_NEAR(ppl_of({"--adapter", t.path + "/adapter"}), merged, 1e-6 * merged);
  EXPECT_GT(std::abs(ppl_of({}) - merged), 1e-3 * merged) << "the adapter changed nothing";
  const auto bad = run({"evaluate", "--checkpoint", t.path + "/hf", "--task", "hellaswag", "--data",
                        t.path + "/missing.jsonl", "--device", "cpu"});
  llmtrain::testing::programs::expect_refused(bad, {"missing.jsonl"}, "evaluate of a missing file");
}

TEST(Eval, TheTrainerScoresItsTasksAtEachEvaluationAsTheFinalModelScores) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  llmtrain::testing::RunFolder run;
  const auto s = sentences(data);
  const std::string hs = hellaswag_file(run.dir.path, s);
  std::string text;
  for (int i = 0; i < 12; ++i) text += s[size_t(i)] + " ";
  write(run.dir.path + "/a.txt", text);
  const nlohmann::json tasks = {
      {{"task", "hellaswag"}, {"data", hs}, {"batch", 5}},
      {{"task", "perplexity"}, {"data", {run.dir.path + "/a.txt"}}, {"window", 32}, {"stride", 12}}};
  const auto cfg =
      run.config("out", {"eval.tasks=" + tasks.dump(), "tokenizer.kind=gpt2", "tokenizer.path=" + data + "/gpt2",
                         "train.max_steps=10", "eval.every=5", "checkpoint.every=10"});
  const std::string out = run.dir.path + "/out";
  {
    llmtrain::train::Trainer t(cfg);
    t.run();
  }
  std::vector<nlohmann::json> records;
  std::istringstream in(llmtrain::fs::read_file(out + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    if (j["type"] == "eval_task") records.push_back(j);
  }
  ASSERT_EQ(records.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(records[i]["step"], i < 2 ? 5 : 10);
    EXPECT_EQ(records[i]["name"], i % 2 ? "perplexity" : "hellaswag");
    EXPECT_EQ(records[i]["primary"], i % 2 ? "ppl" : "acc_norm");
  }
  EXPECT_EQ(records[2]["examples"], 12);
  const std::string svg = llmtrain::fs::read_file(out + "/loss.svg");
  EXPECT_THAT(svg, ::testing::HasSubstr(">task score<"));
  EXPECT_THAT(svg, ::testing::HasSubstr("hellaswag acc_norm"));
  EXPECT_THAT(svg, ::testing::HasSubstr("perplexity ppl"));
  // The last figures are the final model's, as a task run on its checkpoint gives them.
  auto model = llmtrain::train::load_checkpoint_model(out);
  const auto tok = llmtrain::train::load_tokenizer(gpt2_tokenizer(data));
  const auto configs = cfg.eval.task_configs();
  for (size_t i = 0; i < 2; ++i) {
    const eval::Task task(configs[i], *tok, std::nullopt, model->block_size());
    const auto r = task.result(task.run(*model));
    for (const auto& score : r.scores)
      EXPECT_NEAR(records[2 + i][score.name].get<double>(), score.value, 1e-9 * std::abs(score.value)) << score.name;
  }
}

TEST(Eval, TaskEntriesOfAConfigAreCheckedAndNamed) {
  llmtrain::testing::RunFolder run;
  const auto refused = [&](const std::string& tasks, std::initializer_list<std::string> parts, bool tok = true) {
    std::vector<std::string> sets = {"eval.tasks=" + tasks};
    if (tok) sets.push_back("tokenizer.kind=gpt2");
    expect_error([&] { run.config("out", sets); }, parts);
  };
  refused(R"({"task": "hellaswag"})", {"eval.tasks must be a list of objects"});
  refused(R"([{"task": "squad", "data": "x"}])",
          {"eval.tasks[0].task must be hellaswag, choice or perplexity", "squad"});
  refused(R"([{"task": "choice"}])", {"eval.tasks[0].data", "missing"});
  refused(R"([{"task": "choice", "data": 3}])", {"eval.tasks[0].data must be a file or a list of files"});
  refused(R"([{"task": "choice", "data": "x", "limt": 3}])", {"eval.tasks[0]: unknown key \"limt\""});
  refused(R"([{"task": "choice", "data": "x", "limit": -3}])", {"eval.tasks[0].limit"});
  refused(R"([{"task": "choice", "data": "x"}])", {"eval.tasks needs tokenizer.kind"}, false);
  EXPECT_TRUE(run.config("out", {"eval.tasks=[]"}).eval.task_configs().empty());
}

TEST(Eval, ScoresOnTheGpuAreTheCpus_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  TempDir t;
  auto model = tiny_gpt2(t.path + "/hf", data);
  const auto tok = llmtrain::train::load_tokenizer(gpt2_tokenizer(data));
  const auto examples = eval::read_choice_examples(hellaswag_file(t.path, sentences(data)), true, *tok, std::nullopt,
                                                   128, 0, false, nullptr);
  const auto cpu = eval::score_choices(*model, examples, 5);
  model->module().to(torch::kCUDA);
  const auto gpu = eval::score_choices(*model, examples, 5);
  model->module().to(torch::kCUDA, torch::kBFloat16);
  const auto bf16 = eval::score_choices(*model, examples, 12);
  for (size_t e = 0; e < examples.size(); ++e)
    for (size_t c = 0; c < examples[e].choices.size(); ++c) {
      const double n = double(examples[e].choices[c].size());
      EXPECT_NEAR(gpu.loglikelihood[e][c], cpu.loglikelihood[e][c], 1e-4 * n) << e << " " << c;
      // bf16 weights and activations: about 1% of each id's log-probability.
      EXPECT_NEAR(bf16.loglikelihood[e][c], cpu.loglikelihood[e][c],
                  0.02 * std::abs(cpu.loglikelihood[e][c]) + 0.05 * n)
          << e << " " << c;
    }
}
