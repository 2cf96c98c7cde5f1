// Token shards in llm.c's format: a header of 256 int32 (magic, version, token count, then zeros)
// followed by the tokens, uint16 (magic 20240520, version 1) or, for vocabularies over 65536 ids,
// uint32 (magic 20240801, version 7). Shards are written atomically and read memory-mapped, with the
// header checked against the file's size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "llmtrain/core/fs.h"

namespace llmtrain::data {

constexpr int64_t kShardHeaderInts = 256;

/// prepare_data's list of the shard set it wrote, beside the shards: {"format": kShardSetFormat,
/// "version": 1, "vocab_size", "eot_id", "documents", "shards": [{"file", "split", "tokens", "bytes"}]}.
constexpr const char* kShardManifest = "manifest.json";
constexpr const char* kShardSetFormat = "llmtrain-shards";

/// Checks `files` against the manifest.json of each of their folders that has one: a shard the
/// manifest does not list (a stale file of another run), or whose size is not the one listed, is an
/// error naming it. Shards without a manifest (llm.c's) pass.
void check_shard_set(const std::vector<std::string>& files);

/// Writes `tokens` as a shard at `path` (temporary file, flushed, renamed). Ids must lie in
/// [0, vocab_size); vocab_size decides the token width. Throws llmtrain::Error naming the first bad id.
///   llmtrain::data::write_shard(out + "/train_000000.bin", ids, 50257);
void write_shard(const std::string& path, const std::vector<int32_t>& tokens, int64_t vocab_size);

/// A read-only, memory-mapped shard.
///   llmtrain::data::Shard shard("train_000000.bin");  shard.read(0, 1025, buffer);
class Shard {
 public:
  /// Maps `path` and validates its header. Throws llmtrain::Error naming the file and what is wrong
  /// (missing, short header, unknown magic or version, token count against file size).
  explicit Shard(const std::string& path);
  ~Shard();
  Shard(Shard&& other) noexcept;
  Shard& operator=(Shard&& other) noexcept;
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  int64_t num_tokens() const { return num_tokens_; }
  int bytes_per_token() const { return bytes_per_token_; }
  const std::string& path() const { return path_; }

  /// Copies tokens [start, start + count) into `out` as int64. Throws llmtrain::Error when the range
  /// leaves the shard.
  void read(int64_t start, int64_t count, int64_t* out) const;

 private:
  std::string path_;
  std::unique_ptr<fs::MappedFile> file_;  // the whole file
  int64_t num_tokens_ = 0;
  int bytes_per_token_ = 2;
};

}  // namespace llmtrain::data
