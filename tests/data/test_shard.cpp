#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/data/shard.h"
#include "test_util.h"

using llmtrain::data::Shard;
using llmtrain::data::write_shard;
using llmtrain::testing::expect_error;
using llmtrain::testing::TempDir;

namespace {

std::vector<int32_t> random_ids(size_t n, int32_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  std::vector<int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

}  // namespace

TEST(Shard, RoundTripsUint16AndUint32Tokens) {
  TempDir dir;
  for (const int64_t vocab : {int64_t(50257), int64_t(65536), int64_t(100000)}) {
    const auto ids = random_ids(1023, int32_t(vocab), unsigned(vocab));
    const std::string path = dir.path + "/train_000000.bin";
    write_shard(path, ids, vocab);
    const Shard shard(path);
    EXPECT_EQ(shard.num_tokens(), 1023);
    EXPECT_EQ(shard.bytes_per_token(), vocab > 65536 ? 4 : 2);
    std::vector<int64_t> back(1000);
    shard.read(23, 1000, back.data());
    for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], ids[23 + i]) << "vocab " << vocab << " token " << i;
    EXPECT_FALSE(llmtrain::fs::exists(path + ".tmp." + std::to_string(::getpid())));
  }
}

TEST(Shard, HeaderIsLlmcs) {
  TempDir dir;
  write_shard(dir.path + "/a.bin", {1, 2, 3}, 50257);
  std::ifstream in(dir.path + "/a.bin", std::ios::binary);
  int32_t header[256];
  in.read(reinterpret_cast<char*>(header), sizeof header);
  EXPECT_EQ(header[0], 20240520);
  EXPECT_EQ(header[1], 1);
  EXPECT_EQ(header[2], 3);
  for (int i = 3; i < 256; ++i) ASSERT_EQ(header[i], 0);
}

TEST(Shard, BadFilesNameTheFileAndTheMismatch) {
  TempDir dir;
  const std::string path = dir.path + "/train_000000.bin";
  expect_error([&] { Shard s(path); }, {path, "cannot open"});

  write_shard(path, random_ids(1000, 50257, 1), 50257);
  ::truncate(path.c_str(), 1024 + 998 * 2);
  expect_error([&] { Shard s(path); }, {path, "header says 1000 tokens, file holds 998"});

  ::truncate(path.c_str(), 100);
  expect_error([&] { Shard s(path); }, {path, "shorter than the 1024-byte header"});

  std::vector<int32_t> junk(300, 7);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(junk.data()), 1200);
  expect_error([&] { Shard s(path); }, {path, "magic 7"});

  write_shard(path, {1, 2}, 50257);
  const Shard shard(path);
  std::vector<int64_t> out(3);
  expect_error([&] { shard.read(0, 3, out.data()); }, {path, "[0, 3)", "2 tokens"});
}

TEST(Shard, RejectsIdsOutsideTheVocabulary) {
  TempDir dir;
  const std::string path = dir.path + "/x.bin";
  expect_error([&] { write_shard(path, {5, 50257}, 50257); }, {path, "token 1 is id 50257", "[0, 50257)"});
  expect_error([&] { write_shard(path, {-1}, 50257); }, {"token 0 is id -1"});
  EXPECT_FALSE(llmtrain::fs::exists(path));  // nothing half-written
}

TEST(Fs, WriteFileAtomicReplacesWhole) {
  TempDir dir;
  const std::string path = dir.path + "/state.json";
  llmtrain::fs::write_file_atomic(path, "first version, longer");
  llmtrain::fs::write_file_atomic(path, "second");
  std::ifstream in(path);
  std::string content((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(content, "second");
  expect_error([&] { llmtrain::fs::write_file_atomic(dir.path + "/missing/x", "y"); }, {"missing/x"});
}
