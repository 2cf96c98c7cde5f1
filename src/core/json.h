// JSON as llmtrain reads it from files, configs and the command line: nesting is bounded before the
// parser sees the text (printing a value recurses once per level, and a crafted file nests millions
// deep), errors name their source and quote at most a short excerpt of a value, and fields are read
// through Object, which checks each one's type and range and names the key when it is wrong.
// Internal to llmtrain (nlohmann_json is a private dependency).
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "llmtrain/core/fs.h"

namespace llmtrain::json {

using Json = nlohmann::json;

/// Deeper nesting is refused before parsing; llmtrain's formats need at most a handful of levels.
constexpr int kMaxDepth = 64;

/// Parses `text`. Throws llmtrain::Error naming `source` for text that is not JSON or nests deeper than
/// kMaxDepth.
///   const Json doc = llmtrain::json::parse(text, "config.json");
Json parse(std::string_view text, const std::string& source);

/// fs::read_file(path, limit), then parse; errors name the path.
Json parse_file(const std::string& path, uint64_t limit = fs::kReadLimit);

/// `v` for an error message: its JSON text, cut to about 60 characters.
std::string excerpt(const Json& v);

/// A JSON object whose fields are read with their type and range checked. Errors read
/// "<where>: <path>.<key> must be ..., got <excerpt>" or "<where>: <path>.<key> is missing".
///   const Object state(doc, "checkpoint runs/x/step_00000010/state.json");
///   const int64_t step = state.integer("step", 0, INT64_MAX);
class Object {
 public:
  /// Throws unless `value` is an object. `path` names it inside its document ("" at the top).
  Object(const Json& value, std::string where, std::string path = "");

  bool has(const std::string& key) const { return v_.contains(key); }
  /// The field itself; throws when it is missing.
  const Json& at(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t min, int64_t max) const;
  /// A finite number in [min, max].
  double number(const std::string& key, double min, double max) const;
  std::string string(const std::string& key) const;
  bool boolean(const std::string& key) const;
  Object object(const std::string& key) const;
  /// The field's full name for messages: "scaler.scale".
  std::string name(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const std::string& where() const { return where_; }
  const Json& value() const { return v_; }

 private:
  [[noreturn]] void wrong(const std::string& key, const std::string& expected) const;
  const Json& v_;
  std::string where_, path_;
};

}  // namespace llmtrain::json
