// SFT windows: loss masks on prompts and padding, plain text, packing, truncation, the loader, and
// bad input. Uses the GPT-2 tokenizer from the shared data.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <fstream>
#include <numeric>

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
  TempFile f(R"({"prompt": "Question: what is two plus two?", "completion": " Answer: four."})"
             "\n"
             R"({"text": "Plain text is trained on everywhere."})"
             "\n");
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 32;
  const SFTDataset sft(*tok, o);
  ASSERT_EQ(sft.size(), 2);
  const auto b = sft.batch({{0}, {1}});
  EXPECT_FALSE(b.positions.defined());  // one example a row: positions 0..T-1
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
  TempFile f(R"({"prompt": "Translate to French: cat", "completion": " chat"})"
             "\n");
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 16;
  const auto b = SFTDataset(*tok, o).batch({{0}});
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
    lines +=
        R"({"prompt": "Count )" + std::to_string(i) + R"(", "completion": " to )" + std::to_string(i + 1) + "\"}\n";
  TempFile f(lines);
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 64;
  const SFTDataset plain(*tok, o);
  o.pack = true;
  const SFTDataset packed(*tok, o);
  std::vector<int64_t> order(40);
  std::iota(order.begin(), order.end(), 0);
  EXPECT_EQ(plain.windows(order).size(), 40u);
  EXPECT_LT(packed.windows(order).size(), 10u);
  // Token by token: every example's inputs and targets, up to its last trained target, cut from a
  // plain row or from a packed row at its positions' restarts, are the same 40 sequences.
  using Example = std::pair<std::vector<int64_t>, std::vector<int64_t>>;
  const auto examples = [&](const SFTDataset& d) {
    const auto b = d.batch(d.windows(order));
    std::vector<Example> out;
    for (int64_t r = 0; r < b.inputs.size(0); ++r) {
      const auto in = row(b.inputs[r]), tg = row(b.targets[r]);
      const auto pos = b.positions.defined() ? row(b.positions[r]) : std::vector<int64_t>(in.size(), 1);
      for (size_t start = 0; start < in.size();) {
        size_t end = start + 1;
        while (end < in.size() && pos[end] != 0) ++end;
        size_t last = end;
        while (last > start && tg[last - 1] == -100) --last;
        if (last > start)
          out.push_back({{in.begin() + long(start), in.begin() + long(last)},
                         {tg.begin() + long(start), tg.begin() + long(last)}});
        start = end;
      }
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  const auto one_a_row = examples(plain), packed_rows = examples(packed);
  EXPECT_EQ(one_a_row.size(), 40u);
  EXPECT_EQ(packed_rows, one_a_row);
}

// Each token of a packed window carries its position within its own example; the padding after the
// last example counts from 0 as a document of its own.
TEST(SFT, PackedWindowsCarryEachExamplesPositions) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  TempFile f(R"({"prompt": "a b", "completion": " c"})"
             "\n"
             R"({"text": "d e f g"})"
             "\n");
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 12;
  o.pack = true;
  const SFTDataset sft(*tok, o);
  const auto windows = sft.windows({0, 1});
  ASSERT_EQ(windows.size(), 1u);
  const auto b = sft.batch(windows);
  ASSERT_TRUE(b.positions.defined());
  const int64_t n0 = int64_t(tok->encode("a b").size() + tok->encode(" c").size()),  // + end-of-text - 1
      n1 = int64_t(tok->encode("d e f g").size());
  std::vector<int64_t> want;
  for (int64_t n : {n0, n1, 12 - n0 - n1})
    for (int64_t k = 0; k < n; ++k) want.push_back(k);
  EXPECT_EQ(row(b.positions[0]), want);
}

// The bug packing must not have: an example that sees the examples packed before it. The logits of
// every example in a packed window equal its logits alone in a window of its own.
TEST(SFT, PackedExamplesAttendOnlyToThemselves) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  TempFile f(R"({"prompt": "The capital of France is", "completion": " Paris."})"
             "\n"
             R"({"text": "Seven times six is forty-two."})"
             "\n"
             R"({"prompt": "Q: the colour of the sky?", "completion": " A: blue"})"
             "\n");
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 40;
  o.pack = true;
  const SFTDataset sft(*tok, o);
  ASSERT_EQ(sft.windows({0, 1, 2}).size(), 1u);
  torch::manual_seed(0);
  llmtrain::nn::GPT2 model(llmtrain::nn::GPT2Config::preset("tiny"));
  model->eval();
  torch::NoGradGuard no_grad;
  const auto packed = sft.batch(sft.windows({2, 0, 1}));
  const auto together = model(packed.inputs, packed.targets, packed.positions).logits[0];
  const auto unmasked = model(packed.inputs).logits[0];
  int64_t at = 0;
  for (const int64_t i : {2, 0, 1}) {
    const auto alone = sft.batch({{i}});
    const int64_t n = alone.targets[0].ne(-100).nonzero().max().item<int64_t>() + 1;  // the example's tokens
    const auto mine = together.narrow(0, at, n),
               own = model->forward(alone.inputs, {}, alone.positions).logits[0].narrow(0, 0, n);
    EXPECT_TRUE(torch::allclose(mine, own, 1e-4, 1e-4))
        << "example " << i << ": " << (mine - own).abs().max().item<double>();
    if (at > 0) {
      EXPECT_FALSE(torch::allclose(unmasked.narrow(0, at, n), own, 1e-4, 1e-4)) << "example " << i;
    }
    at += n;
  }
}

// Packing is done anew each epoch from that epoch's shuffled order: every example once an epoch, in
// windows that differ from epoch to epoch.
TEST(SFT, PackedWindowsAreLaidAnewEachEpoch) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  std::string lines;
  for (int i = 0; i < 30; ++i) lines += R"({"text": "example number )" + std::to_string(i) + "\"}\n";
  TempFile f(lines);
  SFTOptions o;
  o.path = f.path;
  o.seq_len = 24;
  o.pack = true;
  const SFTDataset sft(*tok, o);
  std::vector<int64_t> order(30);
  std::iota(order.begin(), order.end(), 0);
  const int64_t trained = sft.batch(sft.windows(order)).targets.ne(-100).sum().item<int64_t>();
  SFTLoader loader(sft, {.batch_size = 1, .seed = 5});
  std::vector<std::vector<std::vector<int64_t>>> epochs(3);  // each epoch's windows, sorted
  for (auto& windows : epochs) {
    const int64_t epoch = loader.state().epoch;
    int64_t targets = 0;
    while (loader.state().epoch == epoch) {
      const auto b = loader.next();
      windows.push_back(row(b.inputs[0]));
      targets += b.targets.ne(-100).sum().item<int64_t>();
    }
    EXPECT_EQ(targets, trained) << "epoch " << epoch;  // every example once
    std::sort(windows.begin(), windows.end());
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
}

TEST(SFT, LongExamplesAreCutOrDroppedAndCounted) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  std::string long_text;
  for (int i = 0; i < 50; ++i) long_text += " word";
  TempFile f(R"({"prompt": "Short", "completion": ")" + long_text + "\"}\n" + R"({"prompt": ")" + long_text +
             R"(", "completion": " lost"})"
             "\n" +
             R"({"prompt": "Fine", "completion": " yes"})"
             "\n");
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
  SFTLoader r0(sft, {.batch_size = 2, .rank = 0, .world_size = 2}),
      r1(sft, {.batch_size = 2, .rank = 1, .world_size = 2});
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
  TempFile f(R"({"prompt": "ok", "completion": " fine"})"
             "\n"
             R"({"prompt": "no completion"})"
             "\n[1, 2]\n{oops\n");
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
