// SFT windows: loss masks on prompts and padding, plain text, packing, truncation, the loader, and
// bad input. Uses the GPT-2 tokenizer from the shared data.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/data/sft.h"
#include "llmtrain/nn/gpt2.h"
#include "llmtrain/tokenizer/gpt2_bpe.h"
#include "test_util.h"

using llmtrain::data::SFTDataset;
using llmtrain::data::SFTLoader;
using llmtrain::data::SFTOptions;
using ::testing::HasSubstr;

namespace {

// A JSONL file with `content` in a temporary directory.
struct TempFile : llmtrain::testing::TempDir {
  std::string dir = TempDir::path;
  std::string path = dir + "/train.jsonl";
  explicit TempFile(const std::string& content) { std::ofstream(path) << content; }
};

std::vector<int64_t> row(const torch::Tensor& t) {
  return std::vector<int64_t>(t.data_ptr<int64_t>(), t.data_ptr<int64_t>() + t.numel());
}

}  // namespace

TEST(SFT, PromptAndPaddingAreMaskedAndTheCompletionIsTrained) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  TempFile f(R"({"prompt": "Question: what is two plus two?", "completion": " Answer: four."})" "\n"
             R"({"text": "Plain text is trained on everywhere."})" "\n");
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 32;
  const SFTDataset sft(*tok, o);
  ASSERT_EQ(sft.size(), 2);
  const auto b = sft.batch({0, 1});
  const auto p = tok->encode("Question: what is two plus two?"), c = tok->encode(" Answer: four.");
  std::vector<int64_t> tokens(p.begin(), p.end());
  tokens.insert(tokens.end(), c.begin(), c.end());
  tokens.push_back(50256);
  std::vector<int64_t> in(32, 50256), tg(32, -100);
  for (size_t k = 0; k + 1 < tokens.size(); ++k) {
    in[k] = tokens[k];
    if (k + 1 >= p.size()) tg[k] = tokens[k + 1];  // predicting a completion token or the end
  }
  EXPECT_EQ(row(b.inputs[0]), in);
  EXPECT_EQ(row(b.targets[0]), tg);
  const auto text = tok->encode("Plain text is trained on everywhere.");
  const auto t1 = row(b.targets[1]);
  for (size_t k = 0; k < text.size(); ++k) EXPECT_NE(t1[k], -100) << k;
  for (size_t k = text.size(); k < 32; ++k) EXPECT_EQ(t1[k], -100) << k;
}

TEST(SFT, TheModelsLossCoversOnlyUnmaskedTargets) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  TempFile f(R"({"prompt": "Translate to French: cat", "completion": " chat"})" "\n");
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 16;
  const auto b = SFTDataset(*tok, o).batch({0});
  torch::manual_seed(0);
  llmtrain::nn::GPT2 model(llmtrain::nn::GPT2Config::preset("tiny"));
  torch::NoGradGuard no_grad;
  const auto out = model(b.inputs, b.targets);
  const auto keep = b.targets[0].ne(-100);
  const auto logp = torch::log_softmax(out.logits[0].to(torch::kDouble), -1);
  const auto picked = logp.index({keep}).gather(1, b.targets[0].index({keep}).unsqueeze(1));
  EXPECT_NEAR(out.loss.item<double>(), -picked.mean().item<double>(), 1e-5);
  EXPECT_EQ(keep.sum().item<int64_t>(), int64_t(tok->encode(" chat").size()) + 1);
}

TEST(SFT, PackingKeepsEveryTrainedTargetInFewerWindows) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  std::string lines;
  for (int i = 0; i < 40; ++i)
    lines += R"({"prompt": "Count )" + std::to_string(i) + R"(", "completion": " to )" + std::to_string(i + 1) + "\"}\n";
  TempFile f(lines);
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 64;
  const SFTDataset plain(*tok, o);
  o.pack = true;
  const SFTDataset packed(*tok, o);
  EXPECT_EQ(plain.size(), 40);
  EXPECT_LT(packed.size(), 10);
  const auto count = [](const SFTDataset& d) {
    std::vector<int64_t> all(size_t(d.size()));
    std::iota(all.begin(), all.end(), 0);
    return d.batch(all).targets.ne(-100).sum().item<int64_t>();
  };
  EXPECT_EQ(count(plain), count(packed));
}

TEST(SFT, LongExamplesAreCutOrDroppedAndCounted) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  std::string long_text;
  for (int i = 0; i < 50; ++i) long_text += " word";
  TempFile f(R"({"prompt": "Short", "completion": ")" + long_text + "\"}\n" +
             R"({"prompt": ")" + long_text + R"(", "completion": " lost"})" "\n" +
             R"({"prompt": "Fine", "completion": " yes"})" "\n");
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 16;
  const SFTDataset sft(*tok, o);
  EXPECT_EQ(sft.examples(), 3);
  EXPECT_EQ(sft.truncated(), 2);
  EXPECT_EQ(sft.dropped(), 1);  // its completion lies beyond seq_len
  EXPECT_EQ(sft.size(), 2);
}

TEST(SFT, LoaderRanksAndResume) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  std::string lines;
  for (int i = 0; i < 13; ++i) lines += R"({"text": "example )" + std::to_string(i) + "\"}\n";
  TempFile f(lines);
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 8;
  const SFTDataset sft(*tok, o);
  SFTLoader single(sft, {.batch_size = 2});
  SFTLoader r0(sft, {.batch_size = 2, .rank = 0, .world_size = 2}), r1(sft, {.batch_size = 2, .rank = 1, .world_size = 2});
  for (int step = 0; step < 10; ++step) {  // crosses epochs (13 windows)
    EXPECT_TRUE(torch::equal(r0.next().inputs, single.next().inputs)) << step;
    EXPECT_TRUE(torch::equal(r1.next().inputs, single.next().inputs)) << step;
  }
  const auto saved = single.state();
  const auto a = single.next(), b = single.next();
  SFTLoader resumed(sft, {.batch_size = 2});
  resumed.load_state(saved);
  EXPECT_TRUE(torch::equal(resumed.next().targets, a.targets));
  EXPECT_TRUE(torch::equal(resumed.next().targets, b.targets));
}

TEST(SFT, BadLinesNameTheLine) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  TempFile f(R"({"prompt": "ok", "completion": " fine"})" "\n" R"({"prompt": "no completion"})" "\n[1, 2]\n{oops\n");
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 16;
  try {
    SFTDataset sft(*tok, o);
    FAIL() << "expected llmtrain::Error";
  } catch (const llmtrain::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("train.jsonl:2"));
    EXPECT_THAT(e.what(), HasSubstr("\"completion\""));
  }
  o.skip_bad_lines = true;
  const SFTDataset sft(*tok, o);
  EXPECT_EQ(sft.skipped_lines(), 3);
  EXPECT_EQ(sft.size(), 1);
  o.path = f.dir + "/missing.jsonl";
  EXPECT_THROW(SFTDataset(*tok, o), llmtrain::Error);
  TempFile empty("\n\n");
  o.path = empty.path;
  EXPECT_THROW(SFTDataset(*tok, o), llmtrain::Error);
}
