// io::SafetensorsFile and io::save_safetensors: a hand-built golden file, round trips, the Python
// safetensors package both ways, and every kind of corrupt header named in its error.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <unistd.h>
#include <cstdlib>
#include <fstream>

#include "llmtrain/io/safetensors.h"
#include "test_util.h"

using llmtrain::io::SafetensorsFile;
using llmtrain::io::save_safetensors;
using llmtrain::testing::expect_error;
using llmtrain::testing::TempDir;

namespace {

// A file from its header text and data bytes, the length prefix written here.
std::string raw_file(const std::string& dir, const std::string& name, const std::string& header,
                     const std::string& data, int64_t claimed_length = -1) {
  const uint64_t n = claimed_length < 0 ? header.size() : uint64_t(claimed_length);
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((n >> (8 * i)) & 0xff);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << bytes << header << data;
  return path;
}

// The four tensors the Python peer also knows (tests/python/safetensors_peer.py).
std::vector<std::pair<std::string, torch::Tensor>> reference() {
  return {{"a", torch::arange(6, torch::kFloat).reshape({2, 3}) / 4},
          {"b", torch::tensor({1.0, -2.0, 0.5, 3.0}).to(torch::kBFloat16)},
          {"c", (torch::arange(6, torch::kFloat) - 2).to(torch::kHalf).reshape({3, 1, 2})},
          {"empty", torch::zeros({0, 5})}};
}

void expect_reference(const SafetensorsFile& f) {
  for (const auto& [name, want] : reference()) {
    ASSERT_TRUE(f.contains(name)) << name;
    const auto got = f.get(name);
    EXPECT_EQ(got.scalar_type(), want.scalar_type()) << name;
    EXPECT_EQ(got.sizes(), want.sizes()) << name;
    EXPECT_TRUE(torch::equal(got, want)) << name;
  }
}

std::string peer(const std::string& mode, const std::string& path) {
  return "'" + llmtrain::testing::test_python() + "' '" + llmtrain::testing::test_source_dir() +
         "/tests/python/safetensors_peer.py' " + mode + " '" + path + "'";
}

}  // namespace

TEST(Safetensors, ReadsAHandBuiltGoldenFile) {
  TempDir dir;
  // Two float32 (1.0, -2.5) then one bfloat16 (0x3fc0 = 1.5), little-endian; the header padded with spaces.
  const std::string data("\x00\x00\x80\x3f\x00\x00\x20\xc0\xc0\x3f", 10);
  const std::string path = raw_file(dir.path, "golden.safetensors",
                                    R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                    R"("y":{"dtype":"BF16","shape":[1,1],"data_offsets":[8,10]},)"
                                    R"("__metadata__":{"format":"pt"}}   )",
                                    data);
  SafetensorsFile f(path);
  EXPECT_EQ(f.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_TRUE(torch::equal(f.get("x"), torch::tensor({1.0f, -2.5f})));
  const auto y = f.get("y");
  EXPECT_EQ(y.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(y.item<float>(), 1.5f);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  // A tensor viewing the mapping outlives the file object.
  torch::Tensor kept;
  {
    SafetensorsFile g(path);
    kept = g.get("x");
  }
  EXPECT_EQ(kept[1].item<float>(), -2.5f);
  kept.add_(1);  // copy-on-write: the file is not changed
  EXPECT_TRUE(torch::equal(SafetensorsFile(path).get("x"), torch::tensor({1.0f, -2.5f})));
}

TEST(Safetensors, RoundTripsAndWritesAtomically) {
  TempDir dir;
  const std::string path = dir.path + "/m.safetensors";
  save_safetensors(path, reference(), {{"who", "llmtrain"}});
  SafetensorsFile f(path);
  expect_reference(f);
  EXPECT_EQ(f.metadata().at("who"), "llmtrain");
  EXPECT_EQ(f.names(), (std::vector<std::string>{"a", "b", "c", "empty"}));  // the order given
  // A strided input is written contiguous.
  const auto t = torch::randn({4, 6}).t();
  save_safetensors(path, {{"t", t}});
  EXPECT_TRUE(torch::equal(SafetensorsFile(path).get("t"), t));
  // A failed write leaves the old file whole and no temporary beside it.
  expect_error([&] { save_safetensors(path, {{"i", torch::zeros({2}, torch::kLong)}}); }, {"i", "Long", "float32"});
  expect_error([&] { save_safetensors(path, {{"a", t}, {"a", t}}); }, {"tensor a is given twice"});
  EXPECT_TRUE(torch::equal(SafetensorsFile(path).get("t"), t));
  EXPECT_FALSE(llmtrain::fs::exists(path + ".tmp." + std::to_string(::getpid())));
}

TEST(Safetensors, AgreesWithThePythonPackageBothWays) {
  TempDir dir;
  const std::string theirs = dir.path + "/theirs.safetensors", ours = dir.path + "/ours.safetensors";
  ASSERT_EQ(std::system(peer("write", theirs).c_str()), 0) << peer("write", theirs);
  SafetensorsFile f(theirs);
  expect_reference(f);
  EXPECT_EQ(f.metadata().at("who"), "peer");
  save_safetensors(ours, reference(), {{"who", "llmtrain"}});
  EXPECT_EQ(std::system(peer("check", ours).c_str()), 0) << peer("check", ours);
}

TEST(Safetensors, CorruptFilesNameTheFileAndTheTensor) {
  TempDir dir;
  const std::string d8(8, '\0');
  const auto bad = [&](const std::string& header, const std::string& data, std::initializer_list<std::string> parts,
                       int64_t claimed = -1) {
    const std::string path = raw_file(dir.path, "bad.safetensors", header, data, claimed);
    expect_error([&] { SafetensorsFile f(path); }, parts);
  };
  std::ofstream(dir.path + "/short.safetensors") << "abc";
  expect_error([&] { SafetensorsFile f(dir.path + "/short.safetensors"); }, {"short.safetensors", "too short"});
  expect_error([&] { SafetensorsFile f(dir.path + "/missing.safetensors"); }, {"missing.safetensors", "cannot open"});
  bad("{}", "", {"bad.safetensors", "header length 1000", "does not fit the file"}, 1000);
  bad(R"({"x":)", "", {"bad.safetensors", "not valid JSON"});
  bad("[1, 2]", "", {"not a JSON object"});
  bad(R"({"x":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", d8, {"tensor x", "dtype I64 is not supported"});
  bad(R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", d8,
      {"tensor x", "8 bytes for shape [3]", "needs 12"});
  bad(R"({"x":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", d8, {"tensor x", "[0, 16]", "outside the 8 bytes"});
  bad(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", d8, {"tensor x", "[8, 0]"});
  bad(R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", d8, {"tensor x", "not a size"});
  bad(R"({"x":{"dtype":"F32","shape":[2]}})", d8, {"tensor x: data_offsets is missing"});
  bad(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"y":{"dtype":"F16","shape":[2],"data_offsets":[4,8]}})",
      d8, {"tensors x [0, 8) and y [4, 8) overlap"});
  bad(R"({"__metadata__":{"k":1}})", "", {"__metadata__.k must be a string, got 1"});
  SafetensorsFile ok(
      raw_file(dir.path, "ok.safetensors", R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", d8));
  expect_error([&] { ok.get("w"); }, {"ok.safetensors", "no tensor named w"});
}
