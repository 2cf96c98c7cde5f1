// The reader maps the whole file once (MAP_PRIVATE, so that a tensor written to in place copies its
// pages instead of changing the file) and validates every entry before the first get(); tensors whose
// bytes are not aligned to their element size are copied out rather than viewed.
#include "llmtrain/io/safetensors.h"

#include <fcntl.h>
#include <nlohmann/json.hpp>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <set>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"

namespace llmtrain::io {
namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeader = 100ull << 20;  // the format's own limit on the header's length

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

struct SafetensorsFile::Mapping {
  void* addr = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (addr) ::munmap(addr, size);
  }
};

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path), map_(std::make_shared<Mapping>()) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  LLMTRAIN_CHECK(fd >= 0, "safetensors ", path, ": cannot open (", std::strerror(errno), ")");
  struct stat st {};
  const bool stat_ok = ::fstat(fd, &st) == 0;
  const uint64_t size = stat_ok ? uint64_t(st.st_size) : 0;
  if (stat_ok && size > 0) {
    void* addr = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd, 0);
    if (addr != MAP_FAILED) {
      map_->addr = addr;
      map_->size = size;
    }
  }
  const int err = errno;
  ::close(fd);
  LLMTRAIN_CHECK(stat_ok, "safetensors ", path, ": cannot stat (", std::strerror(err), ")");
  LLMTRAIN_CHECK(size >= 8, "safetensors ", path, ": ", size, " bytes, too short for the 8-byte header length");
  LLMTRAIN_CHECK(map_->addr, "safetensors ", path, ": cannot map (", std::strerror(err), ")");
  const auto* bytes = static_cast<const unsigned char*>(map_->addr);

  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian
  LLMTRAIN_CHECK(n <= kMaxHeader && n <= size - 8, "safetensors ", path, ": header length ", n, " does not fit ",
                 n > kMaxHeader ? "the format's 100 MB limit" : "the file", " (", size, " bytes)");
  data_offset_ = 8 + n;
  const uint64_t data_size = size - data_offset_;
  Json header;
  try {
    header = Json::parse(reinterpret_cast<const char*>(bytes + 8), reinterpret_cast<const char*>(bytes + 8 + n));
  } catch (const Json::exception& e) {
    LLMTRAIN_CHECK(false, "safetensors ", path, ": the header is not valid JSON (", e.what(), ")");
  }
  LLMTRAIN_CHECK(header.is_object(), "safetensors ", path, ": the header is not a JSON object");

  std::vector<std::pair<std::string, const Entry*>> by_begin;
  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      LLMTRAIN_CHECK(v.is_object(), "safetensors ", path, ": __metadata__ is not an object");
      for (const auto& [k, s] : v.items()) {
        LLMTRAIN_CHECK(s.is_string(), "safetensors ", path, ": __metadata__ value ", k, " is not a string");
        metadata_[k] = s.get<std::string>();
      }
      continue;
    }
    const auto where = [&] { return "safetensors " + path + ": tensor " + name; };
    LLMTRAIN_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), where(),
                   ": expected an object with dtype, shape and data_offsets, got ", v.dump());
    LLMTRAIN_CHECK(v["dtype"].is_string(), where(), ": dtype ", v["dtype"].dump(), " is not a string");
    const auto dtype = parse_dtype(v["dtype"].get<std::string>());
    LLMTRAIN_CHECK(dtype, where(), ": dtype ", v["dtype"].get<std::string>(), " is not supported (F32, F16 or BF16)");
    Entry e{*dtype, {}, 0, 0};
    LLMTRAIN_CHECK(v["shape"].is_array(), where(), ": shape ", v["shape"].dump(), " is not a list");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      LLMTRAIN_CHECK(d.is_number_unsigned() || (d.is_number_integer() && d.get<int64_t>() >= 0), where(), ": shape ",
                     v["shape"].dump(), " holds ", d.dump(), ", not a size");
      const uint64_t s = d.get<uint64_t>();
      LLMTRAIN_CHECK(s == 0 || numel <= data_size / s, where(), ": shape ", v["shape"].dump(),
                     " is larger than the file");
      numel *= s;
      e.shape.push_back(int64_t(s));
    }
    const auto& off = v["data_offsets"];
    LLMTRAIN_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                   where(), ": data_offsets ", off.dump(), " is not [begin, end]");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    LLMTRAIN_CHECK(e.begin <= e.end && e.end <= data_size, where(), ": data_offsets [", e.begin, ", ", e.end,
                   "] lie outside the ", data_size, " bytes of data");
    const uint64_t want = numel * uint64_t(c10::elementSize(*dtype));
    LLMTRAIN_CHECK(e.end - e.begin == want, where(), ": ", e.end - e.begin, " bytes for shape ", v["shape"].dump(),
                   " of ", v["dtype"].get<std::string>(), ", which needs ", want);
    entries_.emplace(name, std::move(e));
  }
  for (const auto& [name, e] : entries_) by_begin.emplace_back(name, &e);
  std::sort(by_begin.begin(), by_begin.end(), [](const auto& a, const auto& b) {
    return a.second->begin != b.second->begin ? a.second->begin < b.second->begin : a.second->end < b.second->end;
  });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    const Entry &prev = *by_begin[i - 1].second, &cur = *by_begin[i].second;
    LLMTRAIN_CHECK(cur.begin >= prev.end || cur.begin == cur.end || prev.begin == prev.end, "safetensors ", path,
                   ": tensors ", by_begin[i - 1].first, " [", prev.begin, ", ", prev.end, ") and ", by_begin[i].first,
                   " [", cur.begin, ", ", cur.end, ") overlap");
  }
}

SafetensorsFile::~SafetensorsFile() = default;

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  for (const auto& [name, e] : entries_) out.push_back(name);
  std::stable_sort(out.begin(), out.end(),
                   [&](const std::string& a, const std::string& b) { return entries_.at(a).begin < entries_.at(b).begin; });
  return out;
}

torch::Tensor SafetensorsFile::get(const std::string& name) const {
  const auto it = entries_.find(name);
  LLMTRAIN_CHECK(it != entries_.end(), "safetensors ", path_, ": no tensor named ", name);
  const Entry& e = it->second;
  auto* p = static_cast<unsigned char*>(map_->addr) + data_offset_ + e.begin;
  const auto opts = torch::TensorOptions().dtype(e.dtype);
  if (e.end == e.begin) return torch::empty(e.shape, opts);
  if (reinterpret_cast<uintptr_t>(p) % c10::elementSize(e.dtype) != 0) {  // an unaligned start: copy it out
    torch::Tensor t = torch::empty(e.shape, opts);
    std::memcpy(t.data_ptr(), p, e.end - e.begin);
    return t;
  }
  std::shared_ptr<Mapping> keep = map_;
  return torch::from_blob(p, e.shape, [keep](void*) mutable { keep.reset(); }, opts);
}

void save_safetensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  Json header = Json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> cpu;
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    LLMTRAIN_CHECK(name != "__metadata__" && !name.empty(), "safetensors ", path, ": ", name.empty() ? "an empty" : name,
                   " is not a tensor name");
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
