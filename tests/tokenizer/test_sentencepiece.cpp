// SentencePiece inside a process that links LibTorch: training BPE and unigram models, loading them
// behind the Tokenizer interface, round trips, specials, byte fallback and bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/tokenizer/sentencepiece.h"
#include "llmtrain/tokenizer/tokenizer.h"
#include "test_util.h"

using llmtrain::tokenizer::SentencePiece;
using llmtrain::tokenizer::train_sentencepiece;
using ::testing::HasSubstr;

namespace {

// A corpus of made-up sentences over a small vocabulary, with a few accented and CJK words.
std::string make_corpus(unsigned seed, int lines) {
  const std::vector<std::string> words = {"the", "model", "learns", "tokens", "from", "text", "and", "data",
                                          "training", "runs", "fast", "on", "a", "GPU", "café", "naïve",
                                          "数据", "模型", "loss", "falls", "step", "by", "steps", "again"};
  std::mt19937 rng(seed);
  std::string out;
  for (int l = 0; l < lines; ++l) {
    const int n = 4 + int(rng() % 9);
    for (int i = 0; i < n; ++i) out += (i ? " " : "") + words[rng() % words.size()];
    out += ".\n";
  }
  return out;
}

struct Trained {
  std::string dir = llmtrain::fs::make_temp_dir("llmtrain_sp_");
  std::string model;
  explicit Trained(const std::string& type) {
    std::ofstream(dir + "/corpus.txt") << make_corpus(7, 3000);
    llmtrain::tokenizer::SentencePieceTrainOptions o;
    o.inputs = {dir + "/corpus.txt"};
    o.model_prefix = dir + "/new/folder/sp";  // created when missing
    o.model_type = type;
    o.vocab_size = 330;  // byte fallback takes 256 ids; the corpus supports ~340
    train_sentencepiece(o);
    model = dir + "/new/folder/sp.model";
  }
  ~Trained() { llmtrain::fs::remove_tree(dir); }
};

}  // namespace

TEST(SentencePiece, TrainsBpeAndUnigramAndRoundTrips) {
  for (const char* type : {"bpe", "unigram"}) {
    Trained t(type);
    ASSERT_TRUE(llmtrain::fs::exists(t.model)) << type;
    const auto tok = llmtrain::tokenizer::load_tokenizer("sentencepiece", t.model);
    EXPECT_EQ(tok->vocab_size(), 330) << type;
    EXPECT_EQ(tok->eot_id(), 2) << type << ": Llama's layout, <unk> 0, <s> 1, </s> 2";
    const std::string text = "the model learns from data again. café 数据 step";
    const auto ids = tok->encode(text);
    EXPECT_LT(tok->encode("the data the model").size(), 18u) << type << ": fewer pieces than characters";
    EXPECT_EQ(tok->decode(ids), text) << type;
  }
}

TEST(SentencePiece, UnseenCharactersFallBackToBytesAndSurviveSplitDecoding) {
  Trained t("bpe");
  const SentencePiece tok(t.model);
  const std::string text = "GPU 😀 Ω";  // none of these characters is in the training text
  const auto ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  // The emoji is four byte pieces; decoded one by one they rejoin to its exact bytes.
  std::string emoji;
  int byte_pieces = 0;
  for (const int32_t id : ids) {
    const std::string piece = tok.decode({id});
    if (piece.size() == 1 && (static_cast<unsigned char>(piece[0]) & 0x80)) {
      emoji += piece;
      ++byte_pieces;
    }
  }
  EXPECT_EQ(byte_pieces, 4 + 2);  // 😀 and Ω
  EXPECT_EQ(emoji, "😀Ω");
}

TEST(SentencePiece, EndOfSequenceIsSpecialOnlyWhenAllowed) {
  Trained t("unigram");
  const SentencePiece tok(t.model);
  ASSERT_TRUE(tok.eot_id().has_value());
  const int32_t eos = *tok.eot_id();
  const auto special = tok.encode("data</s>model", true);
  EXPECT_EQ(std::count(special.begin(), special.end(), eos), 1);
  const auto plain = tok.encode("data</s>model");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eos), 0);
}

TEST(SentencePiece, BadInputNamesTheProblem) {
  const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_sp_bad_");
  llmtrain::testing::expect_error([&] { SentencePiece s(dir + "/missing.model"); }, {"SentencePiece model " + dir + "/missing.model: cannot open (No such file"});
  std::ofstream(dir + "/junk.model") << "not a model";
  llmtrain::testing::expect_error([&] { SentencePiece s(dir + "/junk.model"); }, {dir + "/junk.model could not be loaded"});
  llmtrain::tokenizer::SentencePieceTrainOptions o;
  o.inputs = {dir + "/none.txt"};
  o.model_prefix = dir + "/x";
  llmtrain::testing::expect_error([&] { train_sentencepiece(o); }, {"input " + dir + "/none.txt: cannot open (No such file"});
  std::ofstream(dir + "/c.txt") << make_corpus(1, 50);
  o.inputs = {dir + "/c.txt"};
  o.model_type = "wordpiece";
  llmtrain::testing::expect_error([&] { train_sentencepiece(o); }, {"model_type \"wordpiece\""});
  llmtrain::testing::expect_error([&] { llmtrain::tokenizer::load_tokenizer("bert", ""); }, {"unknown tokenizer \"bert\""});
  llmtrain::fs::remove_tree(dir);
}

// A model whose normalizer table is corrupt (the fuzzer's find: libsentencepiece followed it out of
// its memory and crashed) is refused when it loads, naming the table.
TEST(SentencePiece, ACorruptNormalizerTableIsRefusedNotFollowed) {
  const std::string model = llmtrain::testing::test_source_dir() + "/tests/fuzz/corpus/sentencepiece/corrupt_normalizer_trie.model";
  llmtrain::testing::expect_error([&] { SentencePiece sp(model); },
                                  {"corrupt_normalizer_trie.model could not be loaded", "normalizer table",
                                   "points outside the trie"});
  // The model it was mutated from loads.
  SentencePiece good(llmtrain::testing::test_source_dir() + "/tests/fuzz/corpus/sentencepiece/bpe300.model");
  EXPECT_EQ(good.decode(good.encode("the quick brown fox")), "the quick brown fox");
}

// The tokenizers llmtrain trains keep text as it is: newlines (as byte pieces) and runs of spaces come
// back from decode, so samples and chat formats keep their lines; --fold-whitespace gives
// SentencePiece's own normalisation, which folds them.
TEST(SentencePiece, TrainedModelsKeepNewlinesAndRunsOfSpaces) {
  Trained t("bpe");
  const auto tok = llmtrain::tokenizer::load_tokenizer("sentencepiece", t.model);
  for (const std::string text : {"the model\nlearns\n\nfrom  data", "User: hi\nAssistant:   fast\n", "a\tb\r\nc"})
    EXPECT_EQ(tok->decode(tok->encode(text)), text);
  llmtrain::tokenizer::SentencePieceTrainOptions o;
  o.inputs = {t.dir + "/corpus.txt"};
  o.model_prefix = t.dir + "/folded";
  o.vocab_size = 330;
  o.keep_whitespace = false;
  train_sentencepiece(o);
  const auto folded = llmtrain::tokenizer::load_tokenizer("sentencepiece", o.model_prefix + ".model");
  EXPECT_EQ(folded->decode(folded->encode("the model\nlearns  data")), "the model learns data");
}

// Decoding gives the tokens' bytes; what is printed is valid UTF-8: a lone byte piece of a character
// becomes U+FFFD, and a stream holds back a character until its last byte has come.
TEST(SentencePiece, PrintedTextIsAlwaysValidUtf8) {
  Trained t("bpe");
  const auto tok = llmtrain::tokenizer::load_tokenizer("sentencepiece", t.model);
  const std::string emoji = "\xF0\x9F\x98\x80";  // a character the corpus never had: four byte pieces
  const auto ids = tok->encode(emoji);
  ASSERT_GE(ids.size(), 4u);
  const std::string lone = tok->decode({ids.back()});
  EXPECT_EQ(lone, "\x80");
  EXPECT_EQ(llmtrain::tokenizer::printable_utf8(lone), "\xEF\xBF\xBD");
  const std::string cut = tok->decode({ids.begin(), ids.end() - 2});  // the emoji's first two bytes
  EXPECT_EQ(cut.substr(cut.size() - 2), emoji.substr(0, 2));
  EXPECT_EQ(llmtrain::tokenizer::complete_utf8_prefix(cut), cut.size() - 2);
  const std::string whole = tok->decode(ids);
  EXPECT_EQ(llmtrain::tokenizer::complete_utf8_prefix(whole), whole.size());
  EXPECT_EQ(llmtrain::tokenizer::printable_utf8(whole), whole);
  EXPECT_EQ(llmtrain::tokenizer::printable_utf8("a\xFF" "b"), "a\xEF\xBF\xBD" "b");
}
