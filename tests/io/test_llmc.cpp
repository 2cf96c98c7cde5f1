// io::load_llmc_gpt2 on files written here to llm.c's layout (its header and its 16 tensors, each
// holding all layers, in its order), float32 and bfloat16; and its errors.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <climits>
#include <cstring>
#include <fstream>

#include "io/llmc_file.h"
#include "llmtrain/io/llmc.h"
#include "test_util.h"

using llmtrain::testing::expect_error;
using llmtrain::testing::llmc_bytes;
using llmtrain::testing::TempDir;

namespace {

std::string write(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

}  // namespace

TEST(LlmcCheckpoint, LoadsFloat32AndBFloat16Files) {
  TempDir dir;
  torch::manual_seed(5);
  auto model = llmtrain::nn::GPT2(llmtrain::nn::GPT2Config::preset("tiny").vocab_size(1000).block_size(64));
  for (const int32_t version : {3, 5}) {
    SCOPED_TRACE(version);
    const auto path = write(dir.path + "/m.bin", llmc_bytes(model, version, 1088));  // llm.c pads its own way
    auto loaded = llmtrain::io::load_llmc_gpt2(path);
    EXPECT_EQ(loaded->cfg.n_layer(), 2);
    EXPECT_EQ(loaded->cfg.vocab_size(), 1000);
    const auto want = model->named_parameters();
    for (const auto& p : loaded->named_parameters()) {
      auto w = want[p.key()].detach();
      if (version == 5) w = w.to(torch::kBFloat16).to(torch::kFloat);
      if (p.key() == "transformer.wte.weight") {
        EXPECT_EQ(p.value().narrow(0, 1000, 24).abs().max().item<double>(), 0.0);  // padding rows zero
        w = w.narrow(0, 0, 1000);
      }
      EXPECT_TRUE(torch::equal(p.value().narrow(0, 0, w.size(0)), w)) << p.key();
    }
    torch::NoGradGuard no_grad;
    model->eval();
    loaded->eval();
    const auto ids = torch::randint(1000, {2, 9}, torch::kLong);
    if (version == 3) {
      EXPECT_TRUE(torch::equal(model(ids).logits, loaded(ids).logits));
    }
  }
}

TEST(LlmcCheckpoint, BadFilesNameTheFileAndWhatIsWrong) {
  TempDir dir;
  auto model = llmtrain::nn::GPT2(llmtrain::nn::GPT2Config::preset("tiny").vocab_size(1000).block_size(64));
  const std::string good = llmc_bytes(model, 3, 1024);
  expect_error([&] { llmtrain::io::load_llmc_gpt2(dir.path + "/none.bin"); },
               {"llm.c model " + dir.path + "/none.bin: cannot open (No such file"});
  expect_error([&] { llmtrain::io::load_llmc_gpt2(write(dir.path + "/s.bin", good.substr(0, 100))); },
               {"s.bin", "shorter than the 1024-byte header"});
  std::string b = good;
  b[0] = 1;
  expect_error([&] { llmtrain::io::load_llmc_gpt2(write(dir.path + "/m.bin", b)); }, {"m.bin", "magic number"});
  b = good;
  b[4] = 4;
  expect_error([&] { llmtrain::io::load_llmc_gpt2(write(dir.path + "/v.bin", b)); }, {"v.bin", "version 4"});
  expect_error([&] { llmtrain::io::load_llmc_gpt2(write(dir.path + "/t.bin", good.substr(0, good.size() - 4))); },
               {"t.bin", "bytes; its header describes"});
  b = good;
  const int32_t zero = 0;
  std::memcpy(&b[4 * 4], &zero, 4);  // n_layer 0
  expect_error([&] { llmtrain::io::load_llmc_gpt2(write(dir.path + "/h.bin", b)); }, {"h.bin", "n_layer 0"});
}

// Every field of the header, zero, negative and past what the file holds: an error naming the file and
// the sizes, never an allocation of what the header claims.
TEST(LlmcCheckpoint, EveryHeaderFieldOutOfRangeIsNamed) {
  TempDir dir;
  auto model = llmtrain::nn::GPT2(llmtrain::nn::GPT2Config::preset("tiny").vocab_size(1000).block_size(64));
  const std::string good = llmc_bytes(model, 3, 1024);
  const char* names[] = {"max_seq_len", "vocab_size", "n_layer", "n_head", "n_embd", "padded_vocab_size"};
  for (int field = 2; field < 8; ++field)
    for (const int32_t value : {0, -7, 1 << 30, INT32_MAX}) {
      std::string b = good;
      std::memcpy(&b[size_t(4 * field)], &value, 4);
      const std::string path = write(dir.path + "/f.bin", b);
      SCOPED_TRACE(std::string(names[field - 2]) + " = " + std::to_string(value));
      try {
        llmtrain::io::load_llmc_gpt2(path);
        ADD_FAILURE() << "taken";
      } catch (const llmtrain::Error& e) {
        EXPECT_THAT(e.what(), ::testing::HasSubstr("llm.c model " + path));
        if (value <= 0) {
          EXPECT_THAT(e.what(), ::testing::HasSubstr(std::string(names[field - 2]) + " " + std::to_string(value)));
        }
      }
    }
}
