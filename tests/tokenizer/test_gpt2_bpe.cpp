// GPT-2 BPE against tiktoken's "gpt2" encoding (run offline by tests/python/tiktoken_ids.py) on hard
// strings and the whole State of the Union corpus, plus specials, decoding and bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/tokenizer/gpt2_bpe.h"
#include "test_util.h"
#include "tokenizer/hard_strings.h"

using llmtrain::tokenizer::GPT2BPE;
using ::testing::HasSubstr;
namespace lt = llmtrain::testing;

namespace {

// tiktoken's ids for each text, from the Python peer.
std::vector<std::vector<int32_t>> tiktoken_ids(const std::string& data_dir, const std::vector<std::string>& texts) {
  const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_tok_");
  std::ofstream(dir + "/in.json") << nlohmann::json(texts).dump();
  const std::string cmd = "'" + lt::test_python() + "' '" + lt::test_source_dir() + "/tests/python/tiktoken_ids.py' '" +
                          data_dir + "/gpt2' '" + dir + "/in.json' '" + dir + "/out.json'";
  EXPECT_EQ(lt::run_command(cmd), 0) << cmd;
  auto ids = nlohmann::json::parse(llmtrain::fs::read_file(dir + "/out.json")).get<std::vector<std::vector<int32_t>>>();
  llmtrain::fs::remove_tree(dir);
  return ids;
}

}  // namespace

TEST(GPT2BPE, MatchesTiktokenOnHardStrings) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = GPT2BPE::from_dir(data + "/gpt2");
  const auto expected = tiktoken_ids(data, lt::kHardStrings);
  ASSERT_EQ(expected.size(), lt::kHardStrings.size());
  for (size_t i = 0; i < lt::kHardStrings.size(); ++i) {
    const auto ids = tok->encode(lt::kHardStrings[i]);
    EXPECT_EQ(ids, expected[i]) << "text #" << i << ": " << lt::kHardStrings[i].substr(0, 40);
    EXPECT_EQ(tok->decode(ids), lt::kHardStrings[i]) << "text #" << i;
  }
}

TEST(GPT2BPE, MatchesTiktokenOnTheWholeCorpus) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = GPT2BPE::from_dir(data + "/gpt2");
  const auto files = lt::sotu_files(data);
  ASSERT_EQ(files.size(), 233u);
  std::vector<std::string> texts;
  for (const auto& f : files) texts.push_back(llmtrain::fs::read_file(f));
  const auto expected = tiktoken_ids(data, texts);
  int64_t tokens = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    const auto ids = tok->encode(texts[i]);
    ASSERT_EQ(ids, expected[i]) << files[i];
    tokens += int64_t(ids.size());
  }
  EXPECT_GT(tokens, 2000000);
}

// Pieces longer than 64 bytes go through the heap merge: words, numbers, punctuation and whitespace runs
// of many lengths, each one piece to the pre-tokeniser, against tiktoken.
TEST(GPT2BPE, LongPiecesMergeAsTiktokenDoes) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = GPT2BPE::from_dir(data + "/gpt2");
  std::mt19937 rng(11);
  const std::vector<std::string> alphabets = {
      "abcdefghijklmnopqrstuvwxyz", "etaoinshr", "ab", "a", "0123456789", "!?.,;:-_*#", "thequickbrownfox"};
  std::vector<std::string> texts;
  for (const int len : {63, 64, 65, 66, 100, 257, 1000, 4096, 20000})
    for (const auto& abc : alphabets) {
      std::string word;
      for (int i = 0; i < len; ++i) word += abc[rng() % abc.size()];
      texts.push_back(word);
      texts.push_back(" " + word);  // GPT-2's pieces carry their leading space
    }
  texts.push_back(std::string(5000, ' ') + "x");
  texts.push_back("é" + std::string(3000, 'e') + "😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀😀");
  const auto expected = tiktoken_ids(data, texts);
  ASSERT_EQ(expected.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i)
    EXPECT_EQ(tok->encode(texts[i]), expected[i]) << "text #" << i << ": " << texts[i].substr(0, 40);
}

// A word of a megabyte (no spaces: one piece) is merged in O(n log n), not in the minutes the quadratic
// scan took; its ids decode back to it. (The time itself is bench_tokenizer's row, not a test's.)
TEST(GPT2BPE, AMegabyteWordEncodesAndRoundTrips) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = GPT2BPE::from_dir(data + "/gpt2");
  std::mt19937 rng(5);
  std::string word;
  for (int i = 0; i < (1 << 20); ++i) word += char('a' + rng() % 26);
  const auto ids = tok->encode(word);
  EXPECT_GT(ids.size(), word.size() / 8);
  EXPECT_EQ(tok->decode(ids), word);
}

TEST(GPT2BPE, EndOfTextIsSpecialOnlyWhenAllowed) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = GPT2BPE::from_dir(data + "/gpt2");
  EXPECT_EQ(tok->vocab_size(), 50257);
  ASSERT_EQ(tok->eot_id(), 50256);
  const std::string text = "one<|endoftext|>two<|endoftext|>";
  const auto special = tok->encode(text, /*allow_special=*/true);
  EXPECT_EQ(std::count(special.begin(), special.end(), 50256), 2);
  EXPECT_EQ(special.back(), 50256);
  const auto plain = tok->encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 50256), 0);
  EXPECT_EQ(tok->decode(plain), text);
  EXPECT_EQ(tok->decode(special), text);
}

TEST(GPT2BPE, DecodingSplitCharactersLosesNoBytes) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = GPT2BPE::from_dir(data + "/gpt2");
  const std::string text = "😀 中";
  const auto ids = tok->encode(text);
  ASSERT_GT(ids.size(), 3u);  // the emoji alone spans several byte tokens
  std::string joined;
  for (int32_t id : ids) joined += tok->decode({id});  // each piece may be half a character
  EXPECT_EQ(joined, text);
}

// vocab.json and merges.txt as Hugging Face's tokenizers library writes them (tests/python/hf_gpt2_files.py:
// compact JSON with characters unescaped, unlike OpenAI's encoder.json) give the same tokenizer.
TEST(GPT2BPE, LoadsHuggingFaceFiles) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_hf_tok_");
  const std::string cmd = "'" + lt::test_python() + "' '" + lt::test_source_dir() +
                          "/tests/python/hf_gpt2_files.py' '" + data + "/gpt2' '" + dir + "'";
  ASSERT_EQ(lt::run_command(cmd), 0) << cmd;
  EXPECT_NE(llmtrain::fs::read_file(dir + "/vocab.json"), llmtrain::fs::read_file(data + "/gpt2/encoder.json"))
      << "the test means another serialisation of the same vocabulary";
  const auto hf = GPT2BPE::from_dir(dir), openai = GPT2BPE::from_dir(data + "/gpt2");
  llmtrain::fs::remove_tree(dir);
  EXPECT_EQ(hf->vocab_size(), openai->vocab_size());
  for (const auto& text : lt::kHardStrings) {
    EXPECT_EQ(hf->encode(text), openai->encode(text)) << text;
    EXPECT_EQ(hf->decode(openai->encode(text)), text);
  }
}

TEST(GPT2BPE, BadInputNamesTheProblem) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = GPT2BPE::from_dir(data + "/gpt2");
  try {
    tok->encode(std::string("ok \xff\xfe", 5));
    FAIL() << "expected llmtrain::Error";
  } catch (const llmtrain::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not valid UTF-8 at byte 3"));
  }
  EXPECT_THROW(tok->encode("\xed\xa0\x80"), llmtrain::Error);  // a UTF-16 surrogate
  EXPECT_THROW(tok->encode("\xc0\xaf"), llmtrain::Error);      // overlong '/'
  try {
    tok->decode({15496, 50257});
    FAIL() << "expected llmtrain::Error";
  } catch (const llmtrain::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("id 50257"));
  }

  const std::string dir = llmtrain::fs::make_temp_dir("llmtrain_bad_tok_");
  try {
    GPT2BPE::from_dir(dir);
    FAIL() << "expected llmtrain::Error";
  } catch (const llmtrain::Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("encoder.json + vocab.bpe"));
    EXPECT_THAT(e.what(), HasSubstr("vocab.json + merges.txt"));
  }
  const auto expect_load_error = [&](const std::string& part) {
    try {
      GPT2BPE::from_dir(dir);
      ADD_FAILURE() << "expected llmtrain::Error with " << part;
    } catch (const llmtrain::Error& e) {
      EXPECT_THAT(e.what(), HasSubstr(part));
    }
  };
  std::ofstream(dir + "/vocab.json") << R"({"a": 0, "b": 1, "ab": 2})";
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\na b\n";
  expect_load_error("vocab.json: no token for byte 0");
  std::ofstream(dir + "/vocab.json") << llmtrain::fs::read_file(data + "/gpt2/encoder.json");
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\n\u0120 t\nx qqqqqqqqqqqq\n";
  expect_load_error("merges.txt:3: merge \"x qqqqqqqqqqqq\" uses or makes a token missing");
  std::ofstream(dir + "/merges.txt") << "#version: 0.2\na b c\n";
  expect_load_error("merges.txt:2: expected two tokens");
  std::ofstream(dir + "/vocab.json") << R"({"a": 0, "b": )";
  EXPECT_THROW(GPT2BPE::from_dir(dir), llmtrain::Error);
  llmtrain::fs::remove_tree(dir);
}
