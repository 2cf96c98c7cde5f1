// The header of a safetensors file (llmtrain/io/safetensors.h has the format), read and checked whole
// without LibTorch, so that the fuzzers reach it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace llmtrain::io::detail {

struct SafetensorsEntry {
  std::string dtype;     // "F32", "F16" or "BF16"
  int element_size = 0;  // bytes
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;  // bytes, from the start of the data
  int64_t numel = 0;
};

struct SafetensorsHeader {
  uint64_t data_offset = 0;  // 8 + the header's length
  std::map<std::string, SafetensorsEntry> entries;
  std::map<std::string, std::string> metadata;  // "__metadata__"
};

/// The header of the file `path`, whose whole content is `bytes` (`size` of them). Checks its length
/// (within the format's 100 MB and the file), its JSON, that every entry has a supported dtype, a shape
/// whose size matches its byte range, a range inside the data, and that no two ranges overlap; throws
/// llmtrain::Error naming the file and the tensor otherwise.
SafetensorsHeader parse_safetensors_header(const std::string& path, const unsigned char* bytes, uint64_t size);

/// The bytes of one element of `dtype`, or 0 for a dtype llmtrain does not read.
int safetensors_element_size(const std::string& dtype);

}  // namespace llmtrain::io::detail
