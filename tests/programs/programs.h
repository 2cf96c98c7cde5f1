// What the tests of llmtrain's programs share: running a program of build/bin as a user would, the
// outcomes they expect, and a tiny run's setting (shards of ids below 256 and a config for a 1-layer
// GPT-2 on them).
#pragma once

#include <dirent.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "llmtrain/core/fs.h"
#include "llmtrain/data/shard.h"
#include "process.h"
#include "test_util.h"

namespace llmtrain::testing::programs {

namespace fs = llmtrain::fs;
using ::testing::HasSubstr;

inline std::string bin(const std::string& name) { return std::string(LLMTRAIN_TEST_BIN_DIR) + "/" + name; }

inline Outcome run(std::vector<std::string> argv, std::map<std::string, std::string> env = {}, std::string in = "",
                   std::string cwd = "", int timeout_s = 120) {
  argv[0] = bin(argv[0]);
  return testing::run({std::move(argv), std::move(env), std::move(in), std::move(cwd), timeout_s});
}

// The program said no: status 1 (not a signal, not the time limit, not 0) and every part in its output.
inline void expect_refused(const Outcome& o, std::initializer_list<std::string> parts, const std::string& what) {
  EXPECT_TRUE(o.exited && o.code == 1) << what << ": " << o.how() << "\n" << o.output;
  for (const auto& p : parts) EXPECT_THAT(o.output, HasSubstr(p)) << what;
}

inline void expect_ok(const Outcome& o, const std::string& what) {
  EXPECT_TRUE(o.exited && o.code == 0) << what << ": " << o.how() << "\n" << o.output;
}

// A tiny run's setting: shards of ids below 256 (a learnable stream), a config that trains a 1-layer,
// 256-id GPT-2 on them in a few steps, and what running it leaves.
struct Setting {
  TempDir t;
  std::string data = t.path + "/data", config = t.path + "/tiny.json";
  Setting() {
    fs::make_dirs(data);
    std::mt19937 rng(3);
    for (const char* name : {"train_000000.bin", "val_000000.bin"}) {
      std::vector<int32_t> ids(4000);
      for (size_t i = 0; i < ids.size(); ++i) ids[i] = i % 50 == 0 ? int32_t(rng() % 256) : (7 * ids[i - 1] + 3) % 256;
      llmtrain::data::write_shard(data + "/" + name, ids, 256);
    }
    fs::write_file_atomic(config, R"({
      "model": {"preset": "tiny", "vocab_size": 256, "n_layer": 1, "block_size": 32},
      "data": {"train": ")" + data + R"(/train_*.bin", "val": ")" +
                                      data + R"(/val_*.bin"},
      "train": {"batch_size": 2, "seq_len": 16, "max_steps": 4, "lr": 1e-3, "schedule": "constant"},
      "eval": {"batches": 1}, "checkpoint": {"every": 2, "keep": 2}, "device": "cpu",
      "out_dir": ")" + t.path + R"(/run"})");
  }
  std::vector<std::string> train(const std::string& out, std::vector<std::string> extra = {}) const {
    std::vector<std::string> argv = {"train", "--config", config, "--set", "out_dir=" + out};
    for (const auto& e : extra) argv.insert(argv.end(), {"--set", e});
    return argv;
  }
  // A trained run (model-only export of it too, as a native checkpoint and a Hugging Face folder).
  std::string run_dir() {
    const std::string out = t.path + "/runs/run";
    if (!fs::exists(out)) expect_ok(run(train(out)), "the tiny run");
    return out;
  }
  std::string hf_dir() {
    const std::string out = t.path + "/hf";
    if (!fs::exists(out)) expect_ok(run({"convert", "--from", "native", run_dir(), "--to", "hf", out}), "export");
    return out;
  }
};

inline std::string listing(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (const dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') names.push_back(e->d_name);
    ::closedir(d);
  }
  std::sort(names.begin(), names.end());
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : " ") + n;
  return out;
}
}  // namespace llmtrain::testing::programs
