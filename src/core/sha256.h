// SHA-256 (FIPS 180-4) of bytes and of files: how a run folder names the tokenizer it was trained with,
// so that a changed or swapped file is found (and checkable with `sha256sum`).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace llmtrain::detail {

/// An incremental SHA-256.
///   Sha256 h;  h.update("abc");  h.hex();  // "ba7816bf..."
class Sha256 {
 public:
  Sha256();
  void update(std::string_view bytes);
  /// The digest as 64 lowercase hex digits; the object is spent after it.
  std::string hex();

 private:
  void block(const unsigned char* p);
  uint32_t h_[8];
  unsigned char buf_[64];
  size_t used_ = 0;
  uint64_t length_ = 0;
};

/// The SHA-256 of the files' contents, one after another (`cat files... | sha256sum`). Throws
/// llmtrain::Error naming a file that cannot be read.
std::string sha256_files(const std::vector<std::string>& paths);

}  // namespace llmtrain::detail
