// prepare_shards: the reference split of the State of the Union corpus to the token, JSONL input,
// sharding, thread-count independence, the val-fraction pick and bad input.
#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/data/prepare.h"
#include "llmtrain/data/shard.h"
#include "llmtrain/tokenizer/gpt2_bpe.h"
#include "test_util.h"

using llmtrain::data::prepare_shards;
using llmtrain::data::PrepareOptions;
using llmtrain::data::Shard;
using llmtrain::testing::expect_error;
using llmtrain::testing::TempDir;

namespace {

std::vector<int64_t> read_shard(const std::string& path) {
  const Shard s(path);
  std::vector<int64_t> out(size_t(s.num_tokens()));
  s.read(0, s.num_tokens(), out.data());
  return out;
}

}  // namespace

// The split behind ENVIRONMENT.md's reference figures: speeches before 2010 train, the rest val.
TEST(Prepare, StateOfTheUnionReferenceSplitToTheToken) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  TempDir out;
  PrepareOptions o;
  o.inputs = {data + "/sotu"};
  DIR* d = ::opendir((data + "/sotu").c_str());
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 4 && name >= "2010") o.val_files.push_back(data + "/sotu/" + name);
  }
  ::closedir(d);
  o.out_dir = out.path;
  const auto s = prepare_shards(*tok, o);
  EXPECT_EQ(s.train_tokens, 1981069);
  EXPECT_EQ(s.val_tokens, 93443);
  EXPECT_EQ(s.train_documents + s.val_documents, 233);
  const auto train = read_shard(out.path + "/train_000000.bin");
  ASSERT_EQ(int64_t(train.size()), s.train_tokens);
  EXPECT_EQ(std::count(train.begin(), train.end(), 50256), s.train_documents);  // one after each speech
  // The first speech, then its end-of-text.
  const auto first = tok->encode(llmtrain::fs::read_file(data + "/sotu/1790_george_washington_n.txt"));
  ASSERT_LT(first.size(), train.size());
  for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(train[i], first[i]) << i;
  EXPECT_EQ(train[first.size()], 50256);
}

TEST(Prepare, JsonlShardsAndThreadsGiveTheSameBytes) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  TempDir dir;
  {
    std::ofstream f(dir.path + "/docs.jsonl");
    for (int i = 0; i < 200; ++i)
      f << R"({"id": )" << i << R"(, "body": "Document number )" << i << R"( says hello."})"
        << "\n";
    f << "\n";  // blank lines are fine
  }
  std::ofstream(dir.path + "/plain.txt") << "A plain text file is one document.";
  std::vector<std::string> bytes;
  for (int threads : {1, 2}) {
    PrepareOptions o;
    o.inputs = {dir.path + "/docs.jsonl", dir.path + "/plain.txt"};
    o.text_field = "body";
    o.out_dir = dir.path + "/out" + std::to_string(threads);
    o.shard_tokens = 500;
    o.threads = threads;
    const auto s = prepare_shards(*tok, o);
    EXPECT_EQ(s.train_documents, 201);
    EXPECT_EQ(s.val_documents, 0);
    EXPECT_EQ(s.train_shards, (s.train_tokens + 499) / 500);
    EXPECT_EQ(Shard(o.out_dir + "/train_000000.bin").num_tokens(), 500);
    std::string all;
    for (int64_t k = 0; k < s.train_shards; ++k) {
      char name[32];
      std::snprintf(name, sizeof name, "/train_%06lld.bin", static_cast<long long>(k));
      all += llmtrain::fs::read_file(o.out_dir + name);
    }
    bytes.push_back(all);
  }
  EXPECT_EQ(bytes[0], bytes[1]);
}

TEST(Prepare, ValFractionIsSeededAndRoughlyRight) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  TempDir dir;
  {
    std::ofstream f(dir.path + "/docs.jsonl");
    for (int i = 0; i < 2000; ++i)
      f << R"({"text": "doc )" << i << R"("})"
        << "\n";
  }
  std::vector<int64_t> val_docs;
  for (int run = 0; run < 2; ++run) {
    PrepareOptions o;
    o.inputs = {dir.path + "/docs.jsonl"};
    o.out_dir = dir.path + "/out" + std::to_string(run);
    o.val_fraction = 0.1;
    val_docs.push_back(prepare_shards(*tok, o).val_documents);
  }
  EXPECT_EQ(val_docs[0], val_docs[1]);
  EXPECT_NEAR(double(val_docs[0]), 200.0, 45.0);  // ~5 standard deviations
}

TEST(Prepare, SeparatorLinesSplitTextFilesIntoDocuments) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  TempDir dir;
  // The fortune format: documents end at a line holding only "%"; a "%" inside a line is text.
  std::ofstream(dir.path + "/quotes") << "First quote,\n  100% sure.\n%\n%\nSecond.\r\n%\r\n\n\nThird.\n%\n";
  PrepareOptions o;
  o.inputs = {dir.path + "/quotes"};
  o.out_dir = dir.path + "/out";
  o.separator = "%";
  const auto s = prepare_shards(*tok, o);
  EXPECT_EQ(s.train_documents, 3);  // the empty document between "%" lines is dropped
  std::vector<int64_t> want;
  for (const char* doc : {"First quote,\n  100% sure.\n", "Second.\r\n", "\n\nThird.\n"}) {
    for (int32_t id : tok->encode(doc)) want.push_back(id);
    want.push_back(50256);
  }
  EXPECT_EQ(read_shard(dir.path + "/out/train_000000.bin"), want);
}

// The Llama family's layout: each document starts with the tokenizer's bos and ends with its
// end-of-text; a tokenizer without a bos is refused by name.
TEST(Prepare, BosStartsEachDocumentWhereAsked) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  // GPT-2's BPE lent a bos (id 50255), as a Llama tokenizer has one.
  struct WithBos : llmtrain::tokenizer::Tokenizer {
    std::unique_ptr<llmtrain::tokenizer::GPT2BPE> bpe;
    std::vector<int32_t> encode(std::string_view text, bool allow_special) const override {
      return bpe->encode(text, allow_special);
    }
    std::string decode(const std::vector<int32_t>& ids) const override { return bpe->decode(ids); }
    int64_t vocab_size() const override { return bpe->vocab_size(); }
    std::optional<int32_t> eot_id() const override { return bpe->eot_id(); }
    std::optional<std::string> eot_text() const override { return bpe->eot_text(); }
    std::optional<int32_t> bos_id() const override { return 50255; }
  } tok;
  tok.bpe = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  TempDir dir;
  std::ofstream(dir.path + "/docs") << "One.\n%\nTwo, three.\n%\n";
  PrepareOptions o;
  o.inputs = {dir.path + "/docs"};
  o.out_dir = dir.path + "/out";
  o.separator = "%";
  o.add_bos = true;
  const auto s = prepare_shards(tok, o);
  std::vector<int64_t> want;
  for (const char* doc : {"One.\n", "Two, three.\n"}) {
    want.push_back(50255);
    for (int32_t id : tok.encode(doc, false)) want.push_back(id);
    want.push_back(50256);
  }
  EXPECT_EQ(read_shard(dir.path + "/out/train_000000.bin"), want);
  EXPECT_EQ(s.train_tokens, int64_t(want.size()));
  o.out_dir = dir.path + "/out2";
  expect_error([&] { prepare_shards(*tok.bpe, o); }, {"--bos", "no bos"});
  EXPECT_FALSE(llmtrain::fs::exists(o.out_dir));
}

TEST(Prepare, BadInputNamesTheFileAndLine) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
  TempDir dir;
  PrepareOptions o;
  o.out_dir = dir.path + "/out";
  o.inputs = {dir.path + "/missing.txt"};
  expect_error([&] { prepare_shards(*tok, o); }, {"missing.txt does not exist"});

  std::ofstream(dir.path + "/bad.jsonl")
      << "{\"text\": \"fine\"}\n{\"text\": 3}\nnot json\n{\"text\": \"also fine\"}\n";
  o.inputs = {dir.path + "/bad.jsonl"};
  expect_error([&] { prepare_shards(*tok, o); }, {"bad.jsonl:2", "string field \"text\"", "--skip-bad-lines"});
  o.skip_bad_lines = true;
  const auto s = prepare_shards(*tok, o);
  EXPECT_EQ(s.skipped_lines, 2);
  EXPECT_EQ(s.train_documents, 2);
  o.skip_bad_lines = false;

  std::ofstream(dir.path + "/latin1.txt") << "caf\xe9";
  o.inputs = {dir.path + "/latin1.txt"};
  expect_error([&] { prepare_shards(*tok, o); }, {"latin1.txt", "not valid UTF-8 at byte 3"});

  llmtrain::fs::make_dirs(dir.path + "/empty");
  o.inputs = {dir.path + "/empty"};
  expect_error([&] { prepare_shards(*tok, o); }, {"no documents"});

  o.inputs = {dir.path + "/bad.jsonl"};
  o.val_fraction = 1.5;
  expect_error([&] { prepare_shards(*tok, o); }, {"val_fraction 1.5"});
}
