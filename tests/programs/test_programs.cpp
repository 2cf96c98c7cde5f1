// Every program of examples/ run end to end as a user runs it, on tiny inputs: a text corpus to a
// tokenizer (train_tokenizer), text to ids and back (tokenize), shards (prepare_data), a trained and
// resumed model (train), samples that stop where they should (generate), the model converted
// each way and still the same (convert), and a fine-tuning run started, refused and resumed
// (finetune). train and finetune refuse to start over a used out_dir. (The schedule is
// constant so that --resume may run further: a cosine one is refused, as exactness requires.)
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "io/llmc_file.h"
#include "llmtrain/data/shard.h"
#include "llmtrain/infer/generate.h"
#include "llmtrain/io/hf_model.h"
#include "llmtrain/tokenizer/hf_tokenizer.h"
#include "llmtrain/train/model_files.h"
#include "llmtrain/train/trainer.h"
#include "programs/programs.h"

using namespace llmtrain::testing::programs;
using ::testing::HasSubstr;
using Ids = std::vector<int32_t>;

namespace {

// Sentences over a small vocabulary, each a document (ended by a "%" line).
std::string corpus_text() {
  const std::vector<std::string> words = {"the",      "model", "learns", "tokens", "from", "text", "and",   "data",
                                          "training", "runs",  "fast",   "on",     "a",    "loss", "falls", "step"};
  std::mt19937 rng(5);
  std::string out;
  for (int l = 0; l < 600; ++l) {
    for (int i = 0, n = 5 + int(rng() % 8); i < n; ++i) out += (i ? " " : "") + words[rng() % words.size()];
    out += ".\n%\n";
  }
  return out;
}

// The ids of a program's `--format ids` line (its last line of output).
Ids ids_of(const llmtrain::testing::Outcome& o) {
  const std::string out = o.output.substr(0, o.output.find_last_not_of('\n') + 1);
  return nlohmann::json::parse(out.substr(out.rfind('\n') + 1)).get<Ids>();
}

}  // namespace

TEST(Programs, FromTextToATrainedModelSamplesConversionsAndAFineTune) {
  llmtrain::testing::TempDir t;
  const std::string corpus = t.path + "/corpus.txt", model = t.path + "/tok/sp.model";
  std::ofstream(corpus) << corpus_text();

  // train_tokenizer: a model, and no second one over it without --force.
  expect_ok(run({"train_tokenizer", "--vocab-size", "300", "--out", t.path + "/tok/sp", corpus}), "train_tokenizer");
  ASSERT_TRUE(fs::exists(model));
  const std::string trained = fs::read_file(model);
  expect_refused(run({"train_tokenizer", "--vocab-size", "300", "--out", t.path + "/tok/sp", corpus}),
                 {model, "exists", "--force"}, "train_tokenizer over its own output");
  EXPECT_EQ(fs::read_file(model), trained);

  // tokenize: text to ids and the ids back to the text.
  const std::string text = "the model learns from data.\nloss  falls";
  const auto enc = run({"tokenize", "--tokenizer", "sentencepiece", "--model", model}, {}, text);
  expect_ok(enc, "tokenize");
  const Ids ids = ids_of(enc);
  EXPECT_EQ(ids, llmtrain::tokenizer::load_tokenizer("sentencepiece", model)->encode(text));
  const auto dec =
      run({"tokenize", "--tokenizer", "sentencepiece", "--model", model, "--decode"}, {}, nlohmann::json(ids).dump());
  expect_ok(dec, "tokenize --decode");
  EXPECT_EQ(dec.output, text);

  // prepare_data: shards of both splits.
  expect_ok(run({"prepare_data", "--tokenizer", "sentencepiece", "--model", model, "--doc-separator", "%",
                 "--val-fraction", "0.1", "--out", t.path + "/data", corpus}),
            "prepare_data");
  EXPECT_TRUE(fs::exists(t.path + "/data/train_000000.bin"));
  EXPECT_TRUE(fs::exists(t.path + "/data/val_000000.bin"));

  // train: a run, refused over its used out_dir, resumed further with --resume.
  const std::string config = t.path + "/tiny.json", run_dir = t.path + "/run";
  std::ofstream(config) << nlohmann::json{
      {"model", {{"preset", "tiny"}, {"vocab_size", 300}, {"n_layer", 1}, {"block_size", 32}}},
      {"data", {{"train", t.path + "/data/train_*.bin"}, {"val", t.path + "/data/val_*.bin"}}},
      {"tokenizer", {{"kind", "sentencepiece"}, {"path", model}}},
      {"train", {{"batch_size", 2}, {"seq_len", 16}, {"max_steps", 6}, {"lr", 1e-3}, {"schedule", "constant"}}},
      {"eval", {{"batches", 1}}},
      {"checkpoint", {{"every", 3}, {"keep", 2}}},
      {"device", "cpu"},
      {"out_dir", run_dir}};
  const auto trained_run = run({"train", "--config", config});
  expect_ok(trained_run, "train");
  EXPECT_THAT(trained_run.output, HasSubstr("done at step 6"));
  const std::string metrics = fs::read_file(run_dir + "/metrics.jsonl");
  expect_refused(run({"train", "--config", config}), {run_dir, "already holds a run", "--resume"},
                 "train over a used out_dir");
  EXPECT_EQ(fs::read_file(run_dir + "/metrics.jsonl"), metrics);
  const auto resumed = run({"train", "--config", config, "--set", "train.max_steps=8", "--resume"});
  expect_ok(resumed, "train --resume");
  EXPECT_THAT(resumed.output, HasSubstr("resumed from " + run_dir + "/checkpoints/step_00000006"));
  EXPECT_THAT(resumed.output, HasSubstr("done at step 8"));

  // generate: text from the run's own tokenizer; ids; --stop-ids ends at the id it names.
  const auto sample =
      run({"generate", "--checkpoint", run_dir, "--prompt", "the model", "--max-new-tokens", "8", "--device", "cpu"});
  expect_ok(sample, "generate");
  EXPECT_EQ(sample.output.rfind("the model", 0), 0u) << sample.output;
  const std::vector<std::string> greedy = {"--prompt-ids", "[5, 9, 12]", "--max-new-tokens", "6",  "--temperature", "0",
                                           "--format",     "ids",        "--device",         "cpu"};
  const auto generate = [&](const std::string& from, std::vector<std::string> extra) {
    std::vector<std::string> argv = {"generate", "--checkpoint", from};
    argv.insert(argv.end(), greedy.begin(), greedy.end());
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto o = run(argv);
    expect_ok(o, "generate --checkpoint " + from);
    return o.exited && o.code == 0 ? ids_of(o) : Ids{};
  };
  const Ids six = generate(run_dir, {"--stop-ids", "[]"});
  ASSERT_EQ(six.size(), 6u);
  EXPECT_EQ(generate(run_dir, {"--stop-ids", "[" + std::to_string(six[2]) + "]"}),
            Ids(six.begin(), six.begin() + 1 + (std::find(six.begin(), six.end(), six[2]) - six.begin())));

  // ... and by default at the tokenizer's end of text: a model whose best next token is </s>.
  const auto tok_cfg = llmtrain::train::model_tokenizer(run_dir);
  ASSERT_TRUE(tok_cfg.has_value());
  const int32_t eot = *llmtrain::train::load_tokenizer(*tok_cfg)->eot_id();
  auto net = llmtrain::testing::as_gpt2(llmtrain::train::load_checkpoint_model(run_dir));
  {
    torch::NoGradGuard no_grad;
    net->eval();
    const auto h = net->transformer(torch::tensor({5, 9, 12}, torch::kLong).view({1, -1}));
    const auto& wte = net->transformer->wte->weight;
    const int64_t first = six[0];
    const double logit = h[0][-1].dot(wte[first]).item<double>();
    wte[eot].copy_(wte[first] * (logit > 0 ? 2.0 : 0.5));
  }
  llmtrain::train::save_model_checkpoint(net.ptr(), t.path + "/ends", {}, tok_cfg);
  EXPECT_EQ(generate(t.path + "/ends", {}), Ids{eot});

  // convert, each way: the same greedy ids from every form of the model.
  const auto convert = [&](std::vector<std::string> argv) {
    argv.insert(argv.begin(), "convert");
    expect_ok(run(argv), argv[2] + " -> " + argv[5]);
  };
  convert({"--from", "native", run_dir, "--to", "hf", t.path + "/hf"});
  convert({"--from", "hf", t.path + "/hf", "--to", "native", t.path + "/from_hf"});
  convert({"--from", "native", run_dir, "--to", "native", t.path + "/native"});
  auto trained_net = llmtrain::testing::as_gpt2(llmtrain::train::load_checkpoint_model(run_dir));
  std::ofstream(t.path + "/model.bin", std::ios::binary) << llmtrain::testing::llmc_bytes(trained_net, 3, 320);
  convert({"--from", "llmc", t.path + "/model.bin", "--to", "native", t.path + "/from_llmc"});
  for (const char* form : {"/hf", "/from_hf", "/native", "/from_llmc"})
    EXPECT_EQ(generate(t.path + form, {"--stop-ids", "[]"}), six) << form;
  EXPECT_EQ(fs::read_file(t.path + "/hf/tokenizer.model"), trained);

  // finetune: from the run, refused over its used out_dir, resumed further with --resume.
  const std::string ft = t.path + "/ft.json", ft_dir = t.path + "/ft";
  std::ofstream(ft) << nlohmann::json{
      {"data", {{"train", t.path + "/data/train_*.bin"}}},
      {"train", {{"batch_size", 2}, {"seq_len", 16}, {"max_steps", 3}, {"lr", 1e-4}, {"schedule", "constant"}}},
      {"checkpoint", {{"every", 3}}},
      {"device", "cpu"},
      {"out_dir", ft_dir}};
  const auto tuned = run({"finetune", "--from", run_dir, "--config", ft});
  expect_ok(tuned, "finetune");
  EXPECT_THAT(tuned.output, HasSubstr("done at step 3"));
  EXPECT_EQ(fs::read_file(ft_dir + "/tokenizer/tokenizer.model"), trained);
  expect_refused(run({"finetune", "--from", run_dir, "--config", ft}), {ft_dir, "already holds a run", "--resume"},
                 "finetune over a used out_dir");
  const auto tuned_more =
      run({"finetune", "--from", run_dir, "--config", ft, "--set", "train.max_steps=5", "--resume"});
  expect_ok(tuned_more, "finetune --resume");
  EXPECT_THAT(tuned_more.output, HasSubstr("resumed from " + ft_dir + "/checkpoints/step_00000003"));
  EXPECT_THAT(tuned_more.output, HasSubstr("done at step 5"));
}

// examples/train_loop.cpp, the loop written out from the library's parts: it learns, logs each step in
// metrics.jsonl, and leaves a model that generate reads; run again, it starts its folder afresh.
TEST(Programs, TheWrittenOutTrainLoopLearnsAndItsModelGenerates) {
  llmtrain::testing::TempDir t;
  const std::string corpus = t.path + "/corpus.txt", model = t.path + "/tok/sp.model", out = t.path + "/loop";
  std::ofstream(corpus) << corpus_text();
  expect_ok(run({"train_tokenizer", "--vocab-size", "300", "--out", t.path + "/tok/sp", corpus}), "train_tokenizer");
  expect_ok(run({"prepare_data", "--tokenizer", "sentencepiece", "--model", model, "--doc-separator", "%", "--out",
                 t.path + "/data", corpus}),
            "prepare_data");
  const std::vector<std::string> loop = {"train_loop", "--train", t.path + "/data/train_*.bin",
                                         "--out",      out,       "--steps",
                                         "40",         "--batch", "8",
                                         "--seq",      "32",      "--lr",
                                         "3e-3"};
  for (int pass = 0; pass < 2; ++pass) {
    const auto o = run(loop, {{"CUDA_VISIBLE_DEVICES", ""}});
    expect_ok(o, "train_loop");
    EXPECT_THAT(o.output, HasSubstr("trained 40 steps"));
  }
  std::vector<double> losses;
  std::istringstream metrics(fs::read_file(out + "/metrics.jsonl"));
  for (std::string line; std::getline(metrics, line);)
    losses.push_back(nlohmann::json::parse(line)["loss"].get<double>());
  ASSERT_EQ(losses.size(), 40u);  // a line a step, the first pass's gone
  EXPECT_GT(losses[0], 10.0);     // ln(50257): a fresh model
  EXPECT_LT(losses[39], losses[0] - 4.0) << "40 steps on a 300-id corpus";
  EXPECT_TRUE(fs::exists(out + "/loss.svg"));
  const auto gen = run({"generate", "--checkpoint", out + "/model", "--prompt-ids", "[5, 9, 12]", "--max-new-tokens",
                        "4", "--temperature", "0", "--format", "ids", "--stop-ids", "[]", "--device", "cpu"});
  expect_ok(gen, "generate --checkpoint " + out + "/model");
  EXPECT_EQ(ids_of(gen).size(), 4u);
}

// The README's chat fine-tune in small: a Llama-family model trained on messages lines with a
// tokenizer.json folder whose chat template names the format (kept by name in the run's config), then
// asked through generate --chat, which lays the question out in that format and stops at its end token.
TEST(Programs, ALlamaFamilyChatRunAndItsAnswer) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  llmtrain::testing::TempDir t;
  const std::string tok = t.path + "/tok", py = "'" + llmtrain::testing::test_python() + "' '" +
                                                llmtrain::testing::test_source_dir() + "/tests/python/";
  const auto corpus = llmtrain::testing::sotu_files(data);
  fs::make_dirs(tok);
  ASSERT_EQ(llmtrain::testing::run_command(py + "tokenizers_peer.py' train llama3 '" + tok + "' '" + corpus[0] + "'"),
            0);
  ASSERT_EQ(llmtrain::testing::run_command(py + "chat_peer.py' template llama3 > '" + t.path + "/template'"), 0);
  std::ofstream(tok + "/tokenizer_config.json")
      << nlohmann::json{{"chat_template", fs::read_file(t.path + "/template")}, {"eos_token", "<|eot_id|>"}}.dump();
  {
    std::ofstream chat(t.path + "/chat.jsonl");
    for (int i = 0; i < 8; ++i)
      chat << nlohmann::json{{"messages",
                              {{{"role", "user"}, {"content", "What is " + std::to_string(i) + " plus one?"}},
                               {{"role", "assistant"}, {"content", "It is " + std::to_string(i + 1) + "."}}}}}
                  .dump()
           << "\n";
  }
  const std::string run_dir = t.path + "/run";
  std::ofstream(t.path + "/chat.json") << nlohmann::json{
      {"model", {{"preset", "llama-tiny"}, {"vocab_size", 3072}}},
      {"data", {{"train", t.path + "/chat.jsonl"}}},
      {"tokenizer", {{"kind", "hf"}, {"path", tok}}},
      {"train", {{"batch_size", 2}, {"seq_len", 48}, {"max_steps", 3}}},
      {"eval", {{"batches", 1}}},
      {"checkpoint", {{"every", 3}}},
      {"device", "cpu"},
      {"out_dir", run_dir}};
  const auto trained = run({"train", "--config", t.path + "/chat.json"});
  expect_ok(trained, "train on chat messages");
  const auto config = nlohmann::json::parse(fs::read_file(run_dir + "/config.json"));
  EXPECT_EQ(config["data"]["chat_template"], "llama3");  // found in the folder, kept by name
  const auto answer = run({"generate", "--checkpoint", run_dir, "--chat", "--prompt", "What is 3 plus one?",
                           "--max-new-tokens", "6", "--temperature", "0", "--format", "ids", "--device", "cpu"});
  expect_ok(answer, "generate --chat");
  const Ids got = ids_of(answer);
  EXPECT_GE(got.size(), 1u);
  EXPECT_LE(got.size(), 6u);
  const auto eot = llmtrain::tokenizer::HFTokenizer::from_dir(tok)->added_token("<|eot_id|>");
  for (size_t i = 0; i + 1 < got.size(); ++i) EXPECT_NE(got[i], *eot) << "generation goes on past the turn's end";
  expect_refused(run({"generate", "--checkpoint", run_dir, "--chat", "--chat-template", "mistral", "--prompt", "Hi",
                      "--device", "cpu"}),
                 {"no special token <s>"}, "generate --chat in a format whose tokens the tokenizer lacks");
  // Pretraining shards in the family's layout: each document opens with <|begin_of_text|>.
  const auto prepared = run({"prepare_data", "--tokenizer", "hf", "--model", tok, "--bos", "--out", t.path + "/shards",
                             "--val-fraction", "0.5", corpus[1], corpus[2], corpus[3]});
  expect_ok(prepared, "prepare_data --tokenizer hf --bos");
  const llmtrain::data::Shard shard(t.path + "/shards/train_000000.bin");
  int64_t first = -1;
  shard.read(0, 1, &first);
  EXPECT_EQ(first, *llmtrain::tokenizer::HFTokenizer::from_dir(tok)->bos_id());
}

// A PEFT LoRA adapter (tests/python/peft_peer.py) merged by convert --adapter: the exported folder has
// the logits of PEFT's merge_and_unload; generate --adapter picks the tokens the merged folder picks.
TEST(Programs, APeftAdapterMergedByConvertAndGenerate) {
  llmtrain::testing::TempDir t;
  ASSERT_EQ(llmtrain::testing::run_command("'" + llmtrain::testing::test_python() + "' '" +
                                           llmtrain::testing::test_source_dir() +
                                           "/tests/python/peft_peer.py' make qwen2 '" + t.path + "' > /dev/null 2>&1"),
            0);
  const std::string merged = t.path + "/merged";
  const auto converted =
      run({"convert", "--from", "hf", t.path + "/base", "--adapter", t.path + "/adapter", "--to", "hf", merged});
  expect_ok(converted, "convert --adapter");
  EXPECT_THAT(converted.output, HasSubstr("merged adapter " + t.path + "/adapter into 6 layers"));
  const auto idx = llmtrain::testing::ids_file(t.path + "/ids.json");
  auto model = llmtrain::io::load_hf_model(merged);
  model->module().eval();
  torch::NoGradGuard no_grad;
  const auto logits = model->logits(idx).contiguous();
  const auto want = llmtrain::testing::floats_file(t.path + "/merged.bin", logits.sizes());
  EXPECT_LT((logits - want).abs().max().item<double>(), 1e-5 * std::max(1.0, want.abs().max().item<double>()));

  std::vector<int64_t> first(idx[0].data_ptr<int64_t>(), idx[0].data_ptr<int64_t>() + idx.size(1));
  const std::string prompt = nlohmann::json(first).dump();
  const auto greedy = [&](std::vector<std::string> args) {
    args.insert(args.end(), {"--prompt-ids", prompt, "--max-new-tokens", "8", "--temperature", "0", "--stop-ids", "[]",
                             "--format", "ids", "--device", "cpu"});
    const auto o = run(args);
    expect_ok(o, "generate");
    return ids_of(o);
  };
  const Ids from_adapter = greedy({"generate", "--checkpoint", t.path + "/base", "--adapter", t.path + "/adapter"});
  EXPECT_EQ(from_adapter.size(), 8u);
  EXPECT_EQ(from_adapter, greedy({"generate", "--checkpoint", merged}));
  EXPECT_NE(from_adapter, greedy({"generate", "--checkpoint", t.path + "/base"})) << "the adapter changes the picks";
  expect_refused(run({"convert", "--from", "hf", t.path + "/base", "--adapter", t.path + "/base", "--to", "hf",
                      t.path + "/other"}),
                 {"PEFT adapter folder " + t.path + "/base: no adapter_config.json"},
                 "convert --adapter of a model folder");
  EXPECT_FALSE(fs::exists(t.path + "/other")) << "nothing written for a refused adapter";
}

// finetune with LoRA from a Hugging Face folder: its checkpoint is a PEFT adapter folder that PEFT
// reads onto the same base with the logits llmtrain's merged checkpoint gives, and generate takes it.
TEST(Programs, ALoraFineTuneOfAHuggingFaceFolderIsAPeftAdapter) {
  llmtrain::testing::TempDir t;
  const std::string peer = "'" + llmtrain::testing::test_python() + "' '" + llmtrain::testing::test_source_dir() +
                           "/tests/python/peft_peer.py' ";
  ASSERT_EQ(llmtrain::testing::run_command(peer + "make llama '" + t.path + "' > /dev/null 2>&1"), 0);
  std::mt19937 rng(3);
  std::vector<int32_t> tokens(4096);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = i % 32 == 0 ? int32_t(rng() % 96) : (tokens[i - 1] * 5 + 1) % 96;
  llmtrain::data::write_shard(t.path + "/train_000000.bin", tokens, 96);
  const std::string run_dir = t.path + "/run";
  std::ofstream(t.path + "/lora.json") << nlohmann::json{
      {"data", {{"train", t.path + "/train_*.bin"}}},
      {"train", {{"batch_size", 4}, {"seq_len", 32}, {"max_steps", 6}, {"lr", 1e-2}}},
      {"peft", {{"method", "lora"}, {"r", 4}, {"alpha", 8}, {"target_modules", {"all-linear"}}}},
      {"eval", {{"batches", 1}}},
      {"checkpoint", {{"every", 6}}},
      {"device", "cpu"},
      {"out_dir", run_dir}};
  const auto tuned = run({"finetune", "--from", t.path + "/base", "--config", t.path + "/lora.json"});
  expect_ok(tuned, "finetune with peft.method lora");
  // r 4 on 2 layers: q and o 4 x (32 + 32), k and v 4 x (32 + 16), gate, up and down 4 x (32 + 48) each
  EXPECT_THAT(tuned.output, HasSubstr("(LoRA: 3712 trainable)"));
  const std::string ckpt = run_dir + "/checkpoints/step_00000006";
  EXPECT_FALSE(fs::exists(ckpt + "/model.pt")) << "the base is not copied into the checkpoints";
  ASSERT_EQ(llmtrain::testing::run_command(peer + "logits '" + t.path + "/base' '" + ckpt + "' '" + t.path +
                                           "/ids.json' '" + t.path + "/peft.bin' > /dev/null 2>&1"),
            0);
  const auto idx = llmtrain::testing::ids_file(t.path + "/ids.json");
  const auto model = llmtrain::train::load_checkpoint_model(run_dir);  // the base with the adapters merged
  model->module().eval();
  torch::NoGradGuard no_grad;
  const auto logits = model->logits(idx).contiguous();
  const auto want = llmtrain::testing::floats_file(t.path + "/peft.bin", logits.sizes());
  EXPECT_LT((logits - want).abs().max().item<double>(), 1e-5 * std::max(1.0, want.abs().max().item<double>()));
  const auto base = llmtrain::io::load_hf_model(t.path + "/base");
  base->module().eval();
  EXPECT_GT((base->logits(idx) - want).abs().max().item<double>(), 1e-3) << "the adapters changed the model";
  const auto generated = run({"generate", "--checkpoint", run_dir, "--prompt-ids", "[1, 2, 3]", "--max-new-tokens", "4",
                              "--temperature", "0", "--stop-ids", "[]", "--format", "ids", "--device", "cpu"});
  expect_ok(generated, "generate --checkpoint of a LoRA run");
  EXPECT_EQ(ids_of(generated).size(), 4u);
}
