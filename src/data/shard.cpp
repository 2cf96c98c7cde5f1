#include "llmtrain/data/shard.h"

#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <string>

#include "../core/json.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"

namespace llmtrain::data {
namespace {

constexpr int32_t kMagicU16 = 20240520, kVersionU16 = 1;
constexpr int32_t kMagicU32 = 20240801, kVersionU32 = 7;
constexpr int64_t kHeaderBytes = kShardHeaderInts * 4;

template <typename T>
void append_tokens(std::string& bytes, const std::vector<int32_t>& tokens) {
  const size_t at = bytes.size();
  bytes.resize(at + tokens.size() * sizeof(T));
  auto* out = reinterpret_cast<T*>(bytes.data() + at);
  for (size_t i = 0; i < tokens.size(); ++i) out[i] = static_cast<T>(tokens[i]);
}

}  // namespace

void write_shard(const std::string& path, const std::vector<int32_t>& tokens, int64_t vocab_size) {
  LLMTRAIN_CHECK(vocab_size > 0 && vocab_size <= (int64_t(1) << 31), "shard ", path, ": vocab_size ", vocab_size,
                 " is outside [1, 2^31]");
  for (size_t i = 0; i < tokens.size(); ++i)
    LLMTRAIN_CHECK(tokens[i] >= 0 && tokens[i] < vocab_size, "shard ", path, ": token ", i, " is id ", tokens[i],
                   ", outside the vocabulary [0, ", vocab_size, ")");
  const bool wide = vocab_size > 65536;
  std::string bytes(kHeaderBytes, '\0');
  auto* header = reinterpret_cast<int32_t*>(bytes.data());
  header[0] = wide ? kMagicU32 : kMagicU16;
  header[1] = wide ? kVersionU32 : kVersionU16;
  LLMTRAIN_CHECK(tokens.size() <= size_t(INT32_MAX), "shard ", path, ": ", tokens.size(),
                 " tokens do not fit the header's int32 count");
  header[2] = static_cast<int32_t>(tokens.size());
  if (wide) append_tokens<uint32_t>(bytes, tokens);
  else append_tokens<uint16_t>(bytes, tokens);
  fs::write_file_atomic(path, bytes);
}

void check_shard_set(const std::vector<std::string>& files) {
  std::map<std::string, std::map<std::string, int64_t>> listed;  // folder -> file -> bytes (only with a manifest)
  for (const auto& path : files) {
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash), name = path.substr(slash + 1);
    const std::string manifest = dir + "/" + kShardManifest;
    if (!fs::exists(manifest)) continue;
    auto it = listed.find(dir);
    if (it == listed.end()) {
      const json::Json doc = json::parse_file(manifest, uint64_t(64) << 20);
      const json::Object m(doc, manifest);
      LLMTRAIN_CHECK(m.string("format") == kShardSetFormat, manifest, ": format is not \"", kShardSetFormat, "\"");
      const json::Json& shards = m.at("shards");
      LLMTRAIN_CHECK(shards.is_array(), manifest, ": shards must be a list, got ", json::excerpt(shards));
      std::map<std::string, int64_t> entries;
      for (size_t i = 0; i < shards.size(); ++i) {
        const json::Object e(shards[i], manifest, "shards[" + std::to_string(i) + "]");
        entries[e.string("file")] = e.integer("bytes", 0, INT64_MAX);
      }
      it = listed.emplace(dir, std::move(entries)).first;
    }
    const auto entry = it->second.find(name);
    LLMTRAIN_CHECK(entry != it->second.end(), "shard ", path, " is not listed in ", manifest,
                   ": it is not part of the shard set prepare_data wrote there (a file of another run?)");
    uint64_t size = 0;
    ::close(fs::open_regular(path, &size, "shard"));
    LLMTRAIN_CHECK(int64_t(size) == entry->second, "shard ", path, " holds ", size, " bytes; ", manifest, " says ",
                   entry->second, " (the file changed since prepare_data wrote it)");
  }
}

Shard::Shard(const std::string& path) : path_(path) {
  file_ = std::make_unique<fs::MappedFile>(path, "shard");
  const uint64_t size = file_->size();
  LLMTRAIN_CHECK(size >= uint64_t(kHeaderBytes), "shard ", path, ": ", size, " bytes, shorter than the ", kHeaderBytes,
                 "-byte header");
  int32_t header[3];
  std::memcpy(header, file_->data(), sizeof header);
  if (header[0] == kMagicU16) {
    LLMTRAIN_CHECK(header[1] == kVersionU16, "shard ", path, ": version ", header[1], " with magic ", kMagicU16,
                   ", expected ", kVersionU16);
    bytes_per_token_ = 2;
  } else if (header[0] == kMagicU32) {
    LLMTRAIN_CHECK(header[1] == kVersionU32, "shard ", path, ": version ", header[1], " with magic ", kMagicU32,
                   ", expected ", kVersionU32);
    bytes_per_token_ = 4;
  } else {
    LLMTRAIN_CHECK(false, "shard ", path, ": magic ", header[0], " is neither ", kMagicU16, " (uint16 tokens) nor ",
                   kMagicU32, " (uint32 tokens)");
  }
  num_tokens_ = header[2];
  const uint64_t body = size - uint64_t(kHeaderBytes);
  LLMTRAIN_CHECK(num_tokens_ >= 0 && body % uint64_t(bytes_per_token_) == 0 &&
                     body / uint64_t(bytes_per_token_) == uint64_t(num_tokens_),
                 "shard ", path, ": header says ", num_tokens_, " tokens, file holds ",
                 body / uint64_t(bytes_per_token_), body % uint64_t(bytes_per_token_) ? " and a part of one" : "");
}

Shard::~Shard() = default;
Shard::Shard(Shard&&) noexcept = default;
Shard& Shard::operator=(Shard&&) noexcept = default;

void Shard::read(int64_t start, int64_t count, int64_t* out) const {
  LLMTRAIN_CHECK(start >= 0 && count >= 0 && start <= num_tokens_ && count <= num_tokens_ - start, "shard ", path_,
                 ": tokens [", start, ", ",
                 start >= 0 && count >= 0 && count <= INT64_MAX - start ? std::to_string(start + count) : "beyond 2^63",
                 ") lie outside its ", num_tokens_, " tokens");
  const unsigned char* base = file_->data() + kHeaderBytes;
  if (bytes_per_token_ == 2) {
    const auto* t = reinterpret_cast<const uint16_t*>(base) + start;
    for (int64_t i = 0; i < count; ++i) out[i] = t[i];
  } else {
    const auto* t = reinterpret_cast<const uint32_t*>(base) + start;
    for (int64_t i = 0; i < count; ++i) out[i] = t[i];
  }
}

}  // namespace llmtrain::data
