#include "safetensors_header.h"

#include <algorithm>

#include "../core/json.h"
#include "llmtrain/core/checked.h"
#include "llmtrain/core/error.h"

namespace llmtrain::io::detail {
namespace {
constexpr uint64_t kMaxHeader = 100ull << 20;  // the format's own limit on the header's length
constexpr size_t kMaxDims = 16;
}  // namespace

int safetensors_element_size(const std::string& dtype) {
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  return 0;
}

SafetensorsHeader parse_safetensors_header(const std::string& path, const unsigned char* bytes, uint64_t size) {
  LLMTRAIN_CHECK(size >= 8, "safetensors ", path, ": ", size, " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];  // little-endian
  LLMTRAIN_CHECK(n <= kMaxHeader && n <= size - 8, "safetensors ", path, ": header length ", n, " does not fit ",
                 n > kMaxHeader ? "the format's 100 MB limit" : "the file", " (", size, " bytes)");
  SafetensorsHeader h;
  h.data_offset = 8 + n;
  const uint64_t data_size = size - h.data_offset;
  const json::Json header =
      json::parse({reinterpret_cast<const char*>(bytes + 8), size_t(n)}, "safetensors " + path + ": the header");
  LLMTRAIN_CHECK(header.is_object(), "safetensors ", path, ": the header is not a JSON object");

  for (const auto& [name, v] : header.items()) {
    if (name == "__metadata__") {
      const json::Object meta(v, "safetensors " + path, "__metadata__");
      for (const auto& [k, value] : v.items()) h.metadata[k] = meta.string(k);
      continue;
    }
    const std::string where = "safetensors " + path + ": tensor " + name;
    LLMTRAIN_CHECK(v.is_object(), where, ": expected an object with dtype, shape and data_offsets, got ",
                   json::excerpt(v));
    const json::Object t(v, where);
    SafetensorsEntry e;
    e.dtype = t.string("dtype");
    e.element_size = safetensors_element_size(e.dtype);
    LLMTRAIN_CHECK(e.element_size > 0, where, ": dtype ", e.dtype, " is not supported (F32, F16 or BF16)");
    const json::Json& shape = t.at("shape");
    LLMTRAIN_CHECK(shape.is_array() && shape.size() <= kMaxDims, where, ": shape ", json::excerpt(shape),
                   " is not a list of at most ", kMaxDims, " sizes");
    uint64_t numel = 1;
    for (const auto& d : shape) {
      LLMTRAIN_CHECK(d.is_number_unsigned(), where, ": shape ", json::excerpt(shape), " holds ", json::excerpt(d),
                     ", not a size");
      const uint64_t s = d.get<uint64_t>();
      LLMTRAIN_CHECK(s == 0 || numel <= data_size / s, where, ": shape ", json::excerpt(shape),
                     " is larger than the file");
      numel *= s;
      e.shape.push_back(int64_t(s));
    }
    e.numel = int64_t(numel);  // at most data_size
    const json::Json& off = t.at("data_offsets");
    LLMTRAIN_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                   where, ": data_offsets ", json::excerpt(off), " is not [begin, end]");
    e.begin = off[0].get<uint64_t>();
    e.end = off[1].get<uint64_t>();
    LLMTRAIN_CHECK(e.begin <= e.end && e.end <= data_size, where, ": data_offsets [", e.begin, ", ", e.end,
                   "] lie outside the ", data_size, " bytes of data");
    const uint64_t want = numel * uint64_t(e.element_size);  // numel <= data_size < 2^62: no overflow
    LLMTRAIN_CHECK(e.end - e.begin == want, where, ": ", e.end - e.begin, " bytes for shape ", json::excerpt(shape),
                   " of ", e.dtype, ", which needs ", want);
    h.entries.emplace(name, std::move(e));
  }
  std::vector<std::pair<std::string, const SafetensorsEntry*>> by_begin;
  for (const auto& [name, e] : h.entries) by_begin.emplace_back(name, &e);
  std::sort(by_begin.begin(), by_begin.end(), [](const auto& a, const auto& b) {
    return a.second->begin != b.second->begin ? a.second->begin < b.second->begin : a.second->end < b.second->end;
  });
  // Empty tensors overlap nothing; each other range must start at or after the furthest end so far.
  const std::pair<std::string, const SafetensorsEntry*>* furthest = nullptr;  // the range reaching furthest so far
  for (const auto& entry : by_begin) {
    const SafetensorsEntry& e = *entry.second;
    if (e.begin == e.end) continue;
    if (furthest) {
      const SafetensorsEntry& f = *furthest->second;
      LLMTRAIN_CHECK(e.begin >= f.end, "safetensors ", path, ": tensors ", furthest->first, " [", f.begin, ", ", f.end,
                     ") and ", entry.first, " [", e.begin, ", ", e.end, ") overlap");
    }
    if (!furthest || e.end > furthest->second->end) furthest = &entry;
  }
  return h;
}

}  // namespace llmtrain::io::detail
