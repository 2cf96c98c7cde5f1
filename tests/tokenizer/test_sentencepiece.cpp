// SentencePiece inside a process that links LibTorch: training BPE and unigram models, loading them
// behind the Tokenizer interface, round trips, specials, byte fallback and bad input; and llmtrain's
// encoding and decoding against the sentencepiece library's own (tests/python/sentencepiece_ids.py).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/tokenizer/sentencepiece.h"
#include "llmtrain/tokenizer/tokenizer.h"
#include "test_util.h"

using llmtrain::tokenizer::SentencePiece;
using llmtrain::tokenizer::train_sentencepiece;
using ::testing::HasSubstr;
namespace lt = llmtrain::testing;

namespace {

// A corpus of made-up sentences over a small vocabulary, with a few accented and CJK words.
std::string make_corpus(unsigned seed, int lines) {
  const std::vector<std::string> words = {"the",      "model", "learns", "tokens", "from", "text", "and",   "data",
                                          "training", "runs",  "fast",   "on",     "a",    "GPU",  "café",  "naïve",
                                          "数据",     "模型",  "loss",   "falls",  "step", "by",   "steps", "again"};
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

TEST(SentencePiece, EndAndBeginningOfSequenceAreSpecialOnlyWhenAllowed) {
  Trained t("unigram");
  const SentencePiece tok(t.model);
  ASSERT_TRUE(tok.eot_id().has_value());
  ASSERT_TRUE(tok.bos_id().has_value());  // the model's <s>, which Llama-family inputs start with
  EXPECT_EQ(tok.bos_text(), "<s>");
  const int32_t eos = *tok.eot_id(), bos = *tok.bos_id();
  const auto special = tok.encode("<s>data</s>model", true);
  EXPECT_EQ(std::count(special.begin(), special.end(), eos), 1);
  EXPECT_EQ(special.front(), bos);
  const auto plain = tok.encode("<s>data</s>model");
  EXPECT_EQ(std::count(plain.begin(), plain.end(), eos), 0);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), bos), 0);
}

TEST(SentencePiece, BadInputNamesTheProblem) {
  const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_sp_bad_");
  llmtrain::testing::expect_error([&] { SentencePiece s(dir + "/missing.model"); },
                                  {"SentencePiece model " + dir + "/missing.model: cannot open (No such file"});
  std::ofstream(dir + "/junk.model") << "not a model";
  llmtrain::testing::expect_error([&] { SentencePiece s(dir + "/junk.model"); },
                                  {dir + "/junk.model could not be loaded"});
  llmtrain::tokenizer::SentencePieceTrainOptions o;
  o.inputs = {dir + "/none.txt"};
  o.model_prefix = dir + "/x";
  llmtrain::testing::expect_error([&] { train_sentencepiece(o); },
                                  {"input " + dir + "/none.txt: cannot open (No such file"});
  std::ofstream(dir + "/c.txt") << make_corpus(1, 50);
  o.inputs = {dir + "/c.txt"};
  o.model_type = "wordpiece";
  llmtrain::testing::expect_error([&] { train_sentencepiece(o); }, {"model_type \"wordpiece\""});
  llmtrain::testing::expect_error([&] { llmtrain::tokenizer::load_tokenizer("bert", ""); },
                                  {"unknown tokenizer \"bert\""});
  llmtrain::fs::remove_tree(dir);
}

// A model whose normalizer table is corrupt (the fuzzer's find: libsentencepiece followed it out of
// its memory and crashed) is refused when it loads, naming the table.
TEST(SentencePiece, ACorruptNormalizerTableIsRefusedNotFollowed) {
  const std::string model =
      llmtrain::testing::test_source_dir() + "/tests/fuzz/corpus/sentencepiece/corrupt_normalizer_trie.model";
  llmtrain::testing::expect_error(
      [&] { SentencePiece sp(model); },
      {"corrupt_normalizer_trie.model could not be loaded", "normalizer table", "points outside the trie"});
  // The model it was mutated from loads.
  SentencePiece good(llmtrain::testing::test_source_dir() + "/tests/fuzz/corpus/sentencepiece/bpe300.model");
  EXPECT_EQ(good.decode(good.encode("the quick brown fox")), "the quick brown fox");
}

// SentencePiece's trainer warns on std::cerr about lines longer than max_line_bytes: in a program that
// uses std::cerr itself (this one, through gtest) that used to crash (docs/DEVELOPMENT.md, session 14).
TEST(SentencePiece, TrainingThatWarnsDoesNotCrash) {
  const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_sp_warn_");
  std::cerr << "this process writes to std::cerr\n";
  std::ofstream(dir + "/corpus.txt") << make_corpus(5, 2000) << std::string(5000, 'x') << "\n";
  llmtrain::tokenizer::SentencePieceTrainOptions o;
  o.inputs = {dir + "/corpus.txt"};
  o.model_prefix = dir + "/sp";
  o.vocab_size = 330;
  o.max_line_bytes = 1000;
  train_sentencepiece(o);
  const SentencePiece tok(o.model_prefix + ".model");
  EXPECT_EQ(tok.decode(tok.encode("the model learns")), "the model learns");
  llmtrain::fs::remove_tree(dir);
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
  EXPECT_EQ(llmtrain::tokenizer::printable_utf8("a\xFF"
                                                "b"),
            "a\xEF\xBF\xBD"
            "b");
}

// llmtrain's SentencePiece against the sentencepiece library's own (its Python package, a build of its
// own), for models trained by llmtrain on the State of the Union corpus: BPE and unigram keeping text as
// it is, and unigram with SentencePiece's NFKC folding and dummy prefix. The same ids for every paragraph
// of the corpus and for hard strings; the same text back from those ids, and from id lists that cut
// characters apart (the library prints U+FFFD for a partial character, as printable_utf8 does).
TEST(SentencePiece, MatchesTheSentencePieceLibrary) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_sp_peer_");
  const auto files = lt::sotu_files(data);
  ASSERT_GT(files.size(), 100u);
  std::vector<std::string> train_files, texts = {"double  spaces",
                                                 " leading space",
                                                 "trailing space ",
                                                 "  both  ",
                                                 "\ttabs\tinside\t",
                                                 "new\nlines\n\n",
                                                 "\r\nwindows\r\n",
                                                 "full-width ＡＢＣ　１２３！",
                                                 "ﬁ ligature and ① circled",
                                                 "e\u0301 combining n\u0303",
                                                 "byte fallback: 😀 👨‍👩‍👧 数据 한국어",
                                                 "</s> <s> <unk> as text",
                                                 "",
                                                 " ",
                                                 "\n",
                                                 "   \n  \n",
                                                 "U.S. $1,234.56 -- 50% (approx.)",
                                                 "ALL CAPS SENTENCE.",
                                                 std::string(300, 'a'),
                                                 std::string("\x01\x7f ctl", 7)};
  for (size_t i = 0; i < files.size(); ++i) {
    if (i % 8 == 0) train_files.push_back(files[i]);
    if (i % 4 != 1) continue;
    std::istringstream in(llmtrain::fs::read_file(files[i]));
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
  }
  std::mt19937 rng(11);
  struct Model {
    const char* type;
    bool keep_whitespace;
  };
  for (const Model m : {Model{"bpe", true}, Model{"unigram", true}, Model{"unigram", false}}) {
    const std::string what = std::string(m.type) + (m.keep_whitespace ? "" : ", folded");
    llmtrain::tokenizer::SentencePieceTrainOptions o;
    o.inputs = train_files;
    o.model_prefix = dir + "/" + m.type + (m.keep_whitespace ? "" : "_folded");
    o.model_type = m.type;
    o.vocab_size = 2000;
    o.keep_whitespace = m.keep_whitespace;
    train_sentencepiece(o);
    const SentencePiece ours(o.model_prefix + ".model");
    std::vector<std::vector<int32_t>> id_lists;
    for (int i = 0; i < 200; ++i) {  // any ids, byte pieces and specials among them
      std::vector<int32_t> ids(1 + rng() % 12);
      for (auto& id : ids) id = int32_t(rng() % 2000);
      id_lists.push_back(ids);
    }
    std::ofstream(dir + "/in.json") << nlohmann::json({{"texts", texts}, {"id_lists", id_lists}}).dump();
    const std::string cmd = "'" + lt::test_python() + "' '" + lt::test_source_dir() +
                            "/tests/python/sentencepiece_ids.py' '" + o.model_prefix + ".model' '" + dir +
                            "/in.json' '" + dir + "/out.json'";
    ASSERT_EQ(lt::run_command(cmd), 0) << cmd;
    const auto theirs = nlohmann::json::parse(llmtrain::fs::read_file(dir + "/out.json"));
    int wrong_ids = 0, wrong_text = 0;
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto ids = ours.encode(texts[i]);
      if (ids != theirs["ids"][i].get<std::vector<int32_t>>() && ++wrong_ids <= 3)
        ADD_FAILURE() << what << ": ids of " << nlohmann::json(texts[i]).dump() << "\n theirs: " << theirs["pieces"][i];
      if (ours.decode(ids) != theirs["decoded"][i].get<std::string>() && ++wrong_text <= 3)
        ADD_FAILURE() << what << ": decoded " << nlohmann::json(texts[i]).dump() << " as "
                      << nlohmann::json(ours.decode(ids)).dump() << ", the library as " << theirs["decoded"][i];
    }
    EXPECT_EQ(wrong_ids, 0) << what << " of " << texts.size() << " texts";
    EXPECT_EQ(wrong_text, 0) << what;
    for (size_t i = 0; i < id_lists.size(); ++i)
      EXPECT_EQ(llmtrain::tokenizer::printable_utf8(ours.decode(id_lists[i])),
                theirs["decoded_lists"][i].get<std::string>())
          << what << ": " << nlohmann::json(id_lists[i]).dump();
  }
  llmtrain::fs::remove_tree(dir);
}
