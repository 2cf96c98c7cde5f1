// A folder of token shards for Trainer tests (a learnable stream: each token determines the next) and
// the tiny CPU config that trains on them; shared by the in-process and the mpirun tests.
#pragma once

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "llmtrain/data/shard.h"
#include "llmtrain/train/config.h"
#include "test_util.h"

namespace llmtrain::testing {

/// Shards in a fresh temporary folder; config(out) trains the tiny model on them, out_dir = folder/out.
///   RunFolder run;  llmtrain::train::Trainer t(run.config("one", {"train.max_steps=5"}));
struct RunFolder {
  TempDir dir;
  RunFolder() {
    std::mt19937 rng(0);
    const auto shard = [&](const std::string& name, int n) {
      std::vector<int32_t> t(static_cast<size_t>(n));
      // A learnable stream: each token determines the next (x -> 31 x + 7 mod 4099), from random starts.
      for (size_t i = 0; i < t.size(); ++i)
        t[i] = i % 64 == 0 ? int32_t(rng() % 4099) : int32_t((31 * t[i - 1] + 7) % 4099);
      llmtrain::data::write_shard(dir.path + "/" + name, t, 50257);
    };
    shard("train_000000.bin", 20000);
    shard("train_000001.bin", 15000);
    shard("val_000000.bin", 5000);
  }
  llmtrain::train::TrainerConfig config(const std::string& out, std::vector<std::string> extra = {}) const {
    std::vector<std::string> sets = std::move(extra);  // these replace the folder's own below (a key is set once)
    const auto key = [](const std::string& set) { return set.substr(0, set.find('=')); };
    for (const std::string& own :
         std::vector<std::string>{"data.train=" + dir.path + "/train_*.bin", "data.val=" + dir.path + "/val_*.bin",
                                  "out_dir=" + dir.path + "/" + out, "device=cpu"})
      if (std::none_of(sets.begin(), sets.end(), [&](const std::string& s) { return key(s) == key(own); }))
        sets.push_back(own);
    return llmtrain::train::TrainerConfig::parse(R"({
      "model": {"preset": "tiny"},
      "train": {"batch_size": 4, "seq_len": 32, "total_batch_tokens": 256, "max_steps": 20, "lr": 1e-3,
                "warmup_steps": 2, "schedule": "cosine", "precision": "fp32", "seed": 7},
      "eval": {"every": 10, "batches": 2},
      "checkpoint": {"every": 5, "keep": 2}
    })",
                                                 "test config", sets);
  }
};

}  // namespace llmtrain::testing
