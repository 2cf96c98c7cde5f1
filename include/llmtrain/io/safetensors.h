// The safetensors format: an 8-byte little-endian header length, a JSON header naming each tensor's
// dtype, shape and byte range, then the tensors' bytes. Files are memory-mapped and checked whole
// before any tensor is handed out; written files go to a temporary name and are renamed.
#pragma once

#include <torch/types.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "llmtrain/core/fs.h"

namespace llmtrain::io {

/// A safetensors file, read-only. The constructor checks the header (its length, its JSON, that every
/// entry has a supported dtype (F32, F16, BF16), a shape whose size matches its byte range, a range
/// inside the file, and that no two ranges overlap) and throws llmtrain::Error naming the file and the
/// tensor otherwise. Tensors view the mapping (copy-on-write) and keep it alive.
///   llmtrain::io::SafetensorsFile f("model.safetensors");
///   torch::Tensor wte = f.get("transformer.wte.weight");
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();

  const std::string& path() const { return path_; }
  /// Tensor names in the order of their data in the file.
  std::vector<std::string> names() const;
  bool contains(const std::string& name) const { return entries_.count(name) > 0; }
  /// The tensor `name` (CPU, of its stored dtype); throws llmtrain::Error naming the file for a missing one.
  torch::Tensor get(const std::string& name) const;
  /// The shape of tensor `name`; throws llmtrain::Error naming the file for a missing one.
  std::vector<int64_t> shape(const std::string& name) const;
  /// The number of values its tensors hold, all together.
  int64_t numel() const { return numel_; }
  /// The header's "__metadata__" strings.
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  struct Entry {
    torch::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;  // bytes, from the start of the data
  };
  std::string path_;
  std::shared_ptr<fs::MappedFile> map_;  // copy-on-write: a tensor written to in place never changes the file
  uint64_t data_offset_ = 0;
  int64_t numel_ = 0;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

/// Writes `tensors` (any device; float32, float16 or bfloat16; stored contiguous, in this order) and
/// `metadata` as a safetensors file at `path`, atomically: a crash leaves either the old file or the
/// whole new one. Throws llmtrain::Error for a repeated name or an unsupported dtype.
///   llmtrain::io::save_safetensors("model.safetensors", {{"w", w}}, {{"format", "pt"}});
void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata = {});

}  // namespace llmtrain::io
