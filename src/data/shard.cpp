#include "llmtrain/data/shard.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

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

Shard::Shard(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LLMTRAIN_CHECK(fd >= 0, "shard ", path, ": cannot open (", std::strerror(errno), ")");
  struct stat st;
  if (::fstat(fd, &st) != 0 || st.st_size < kHeaderBytes) {
    ::close(fd);
    LLMTRAIN_CHECK(false, "shard ", path, ": ", int64_t(st.st_size), " bytes, shorter than the ", kHeaderBytes,
                   "-byte header");
  }
  map_bytes_ = size_t(st.st_size);
  void* m = ::mmap(nullptr, map_bytes_, PROT_READ, MAP_SHARED, fd, 0);
  ::close(fd);
  LLMTRAIN_CHECK(m != MAP_FAILED, "shard ", path, ": cannot map (", std::strerror(errno), ")");
  map_ = static_cast<const unsigned char*>(m);
  try {
    int32_t header[3];
    std::memcpy(header, map_, sizeof header);
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
    const int64_t held = (int64_t(map_bytes_) - kHeaderBytes) / bytes_per_token_;
    LLMTRAIN_CHECK(num_tokens_ >= 0 && (int64_t(map_bytes_) - kHeaderBytes) % bytes_per_token_ == 0 &&
                       held == num_tokens_,
                   "shard ", path, ": header says ", num_tokens_, " tokens, file holds ", held);
  } catch (...) {
    ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
    map_ = nullptr;
    throw;
  }
}

Shard::~Shard() {
  if (map_) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
}

Shard::Shard(Shard&& other) noexcept
    : path_(std::move(other.path_)),
      map_(std::exchange(other.map_, nullptr)),
      map_bytes_(std::exchange(other.map_bytes_, 0)),
      num_tokens_(other.num_tokens_),
      bytes_per_token_(other.bytes_per_token_) {}

Shard& Shard::operator=(Shard&& other) noexcept {
  if (this != &other) {
    if (map_) ::munmap(const_cast<unsigned char*>(map_), map_bytes_);
    path_ = std::move(other.path_);
    map_ = std::exchange(other.map_, nullptr);
    map_bytes_ = std::exchange(other.map_bytes_, 0);
    num_tokens_ = other.num_tokens_;
    bytes_per_token_ = other.bytes_per_token_;
  }
  return *this;
}

void Shard::read(int64_t start, int64_t count, int64_t* out) const {
  LLMTRAIN_CHECK(start >= 0 && count >= 0 && start + count <= num_tokens_, "shard ", path_, ": tokens [", start, ", ",
                 start + count, ") lie outside its ", num_tokens_, " tokens");
  const unsigned char* base = map_ + kHeaderBytes;
  if (bytes_per_token_ == 2) {
    const auto* t = reinterpret_cast<const uint16_t*>(base) + start;
    for (int64_t i = 0; i < count; ++i) out[i] = t[i];
  } else {
    const auto* t = reinterpret_cast<const uint32_t*>(base) + start;
    for (int64_t i = 0; i < count; ++i) out[i] = t[i];
  }
}

}  // namespace llmtrain::data
