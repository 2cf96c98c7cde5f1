#include "json.h"

#include <cmath>
#include <unordered_set>
#include <vector>

#include "llmtrain/core/error.h"

namespace llmtrain::json {
namespace {

// The byte offset where `text` first nests deeper than kMaxDepth, or npos. Brackets inside strings do
// not count; the parser itself finds every other fault.
size_t too_deep_at(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxDepth) return i;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return std::string_view::npos;
}

// nlohmann's messages quote what they last read, which may be a whole long token.
std::string cut(const std::string& s, size_t n = 200) { return s.size() <= n ? s : s.substr(0, n) + "..."; }

}  // namespace

Json parse(std::string_view text, const std::string& source) {
  const size_t deep = too_deep_at(text);
  LLMTRAIN_CHECK(deep == std::string_view::npos, source, ": JSON nested deeper than ", kMaxDepth, " levels (at byte ",
                 deep, ")");
  // A key given twice in one object would silently lose one of its values: refused, named by its path.
  struct Open {
    std::unordered_set<std::string> keys;
    std::string key;  // the last one read
  };
  std::vector<Open> open;
  std::string twice;
  const Json::parser_callback_t unique_keys = [&](int, Json::parse_event_t event, Json& parsed) {
    if (event == Json::parse_event_t::object_start) open.emplace_back();
    else if (event == Json::parse_event_t::object_end && !open.empty()) open.pop_back();
    else if (event == Json::parse_event_t::key && twice.empty() && !open.empty()) {
      open.back().key = parsed.get<std::string>();
      if (!open.back().keys.insert(open.back().key).second)
        for (const auto& o : open) twice += (twice.empty() ? "" : ".") + o.key;
    }
    return true;
  };
  Json doc;
  try {
    doc = Json::parse(text, unique_keys);
  } catch (const Json::exception& e) {
    LLMTRAIN_CHECK(false, source, ": not valid JSON (", cut(e.what()), ")");
  }
  LLMTRAIN_CHECK(twice.empty(), source, ": the key \"", cut(twice, 80),
                 "\" is given twice (one of its values would be lost)");
  return doc;
}

Json parse_file(const std::string& path, uint64_t limit) { return parse(fs::read_file(path, limit), path); }

std::string excerpt(const Json& v) {
  const std::string text = v.dump(-1, ' ', false, Json::error_handler_t::replace);
  return text.size() <= 60 ? text : text.substr(0, 57) + "...";
}

Object::Object(const Json& value, std::string where, std::string path)
    : v_(value), where_(std::move(where)), path_(std::move(path)) {
  LLMTRAIN_CHECK(v_.is_object(), where_, ": ", path_.empty() ? "the document" : path_, " must be a JSON object, got ",
                 excerpt(v_));
}

void Object::wrong(const std::string& key, const std::string& expected) const {
  llmtrain::detail::throw_error(
      llmtrain::detail::str_cat(where_, ": ", name(key), " must be ", expected, ", got ", excerpt(v_.at(key))));
}

const Json& Object::at(const std::string& key) const {
  const auto it = v_.find(key);
  LLMTRAIN_CHECK(it != v_.end(), where_, ": ", name(key), " is missing");
  return *it;
}

int64_t Object::integer(const std::string& key, int64_t min, int64_t max) const {
  const Json& f = at(key);
  const std::string range = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  if (f.is_number_unsigned()) {
    if (f.get<uint64_t>() > uint64_t(INT64_MAX) || f.get<int64_t>() > max || f.get<int64_t>() < min) wrong(key, range);
    return f.get<int64_t>();
  }
  if (!f.is_number_integer() || f.get<int64_t>() < min || f.get<int64_t>() > max) wrong(key, range);
  return f.get<int64_t>();
}

double Object::number(const std::string& key, double min, double max) const {
  const Json& f = at(key);
  if (!f.is_number() || !std::isfinite(f.get<double>()) || f.get<double>() < min || f.get<double>() > max)
    wrong(key, "a number in [" + std::to_string(min) + ", " + std::to_string(max) + "]");
  return f.get<double>();
}

std::string Object::string(const std::string& key) const {
  const Json& f = at(key);
  if (!f.is_string()) wrong(key, "a string");
  return f.get<std::string>();
}

bool Object::boolean(const std::string& key) const {
  const Json& f = at(key);
  if (!f.is_boolean()) wrong(key, "true or false");
  return f.get<bool>();
}

Object Object::object(const std::string& key) const { return Object(at(key), where_, name(key)); }

}  // namespace llmtrain::json
