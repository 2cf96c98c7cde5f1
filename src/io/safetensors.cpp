// The reader maps the whole file once (MAP_PRIVATE, so that a tensor written to in place copies its
// pages instead of changing the file) and validates every entry (safetensors_header.cpp) before the
// first get(); tensors whose bytes are not aligned to their element size are copied out rather than viewed.
#include "llmtrain/io/safetensors.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "safetensors_header.h"

namespace llmtrain::io {
namespace {

using Json = nlohmann::json;

const std::pair<const char*, torch::ScalarType> kDtypes[] = {
    {"F32", torch::kFloat}, {"F16", torch::kHalf}, {"BF16", torch::kBFloat16}};

std::optional<torch::ScalarType> parse_dtype(const std::string& s) {
  for (const auto& [name, t] : kDtypes)
    if (s == name) return t;
  return std::nullopt;
}

const char* dtype_name(torch::ScalarType t) {
  for (const auto& [name, d] : kDtypes)
    if (d == t) return name;
  return nullptr;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  map_ = std::make_shared<fs::MappedFile>(path, "safetensors", /*copy_on_write=*/true);
  detail::SafetensorsHeader h = detail::parse_safetensors_header(path, map_->data(), map_->size());
  data_offset_ = h.data_offset;
  metadata_ = std::move(h.metadata);
  for (auto& [name, e] : h.entries) {
    entries_.emplace(name, Entry{*parse_dtype(e.dtype), std::move(e.shape), e.begin, e.end});
    numel_ += e.numel;
  }
}

SafetensorsFile::~SafetensorsFile() = default;

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  std::stable_sort(out.begin(), out.end(), [&](const std::string& a, const std::string& b) {
    return entries_.at(a).begin < entries_.at(b).begin;
  });
  return out;
}

std::vector<int64_t> SafetensorsFile::shape(const std::string& name) const {
  const auto it = entries_.find(name);
  LLMTRAIN_CHECK(it != entries_.end(), "safetensors ", path_, ": no tensor named ", name);
  return it->second.shape;
}

torch::Tensor SafetensorsFile::get(const std::string& name) const {
  const auto it = entries_.find(name);
  LLMTRAIN_CHECK(it != entries_.end(), "safetensors ", path_, ": no tensor named ", name);
  const Entry& e = it->second;
  unsigned char* p = map_->data() + data_offset_ + e.begin;
  const auto opts = torch::TensorOptions().dtype(e.dtype);
  if (e.end == e.begin) return torch::empty(e.shape, opts);
  if (reinterpret_cast<uintptr_t>(p) % c10::elementSize(e.dtype) != 0) {  // an unaligned start: copy it out
    torch::Tensor t = torch::empty(e.shape, opts);
    std::memcpy(t.data_ptr(), p, e.end - e.begin);
    return t;
  }
  std::shared_ptr<fs::MappedFile> keep = map_;
  return torch::from_blob(
      p, e.shape, [keep](void*) mutable { keep.reset(); }, opts);
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> cpu;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    LLMTRAIN_CHECK(name != "__metadata__" && !name.empty(), "safetensors ", path, ": ",
                   name.empty() ? "an empty" : name, " is not a tensor name");
    LLMTRAIN_CHECK(seen.insert(name).second, "safetensors ", path, ": tensor ", name, " is given twice");
    LLMTRAIN_CHECK(t.defined(), "safetensors ", path, ": tensor ", name, " is undefined");
    const char* dtype = dtype_name(t.scalar_type());
    LLMTRAIN_CHECK(dtype, "safetensors ", path, ": tensor ", name, " is ", t.scalar_type(),
                   "; only float32, float16 and bfloat16 are written");
    cpu.push_back(t.detach().to(torch::kCPU).contiguous());
    const uint64_t bytes = uint64_t(cpu.back().nbytes());
    header[name] = {{"dtype", dtype}, {"shape", t.sizes().vec()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  std::string len(8, '\0');
  for (int i = 0; i < 8; ++i) len[size_t(i)] = char((uint64_t(text.size()) >> (8 * i)) & 0xff);
  fs::AtomicFile f(path);
  f.write(len);
  f.write(text);
  for (const auto& t : cpu) f.write({static_cast<const char*>(t.data_ptr()), size_t(t.nbytes())});
  f.commit();
}

}  // namespace llmtrain::io
