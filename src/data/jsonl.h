// JSONL lines for the data readers: a line that is not a JSON object, or lacks what the reader needs,
// either fails naming file:line, or is counted and skipped when the caller allows it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

#include "llmtrain/core/error.h"

namespace llmtrain::data::detail {

/// Fails (or counts, when `skip`) a bad line; `who` names the reader in the message.
inline void bad_line(const char* who, const std::string& where, const std::string& what, bool skip, int64_t& skipped) {
  LLMTRAIN_CHECK(skip, who, ": ", where, ": ", what, " (--skip-bad-lines skips such lines)");
  ++skipped;
}

/// The line's JSON object; nullopt for a blank line or a skipped bad one.
inline std::optional<nlohmann::json> parse_object(const char* who, const std::string& line, const std::string& where,
                                                  bool skip, int64_t& skipped) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return std::nullopt;
  try {
    auto j = nlohmann::json::parse(line);
    if (j.is_object()) return j;
    bad_line(who, where, "not a JSON object", skip, skipped);
  } catch (const nlohmann::json::exception& e) {
    bad_line(who, where, std::string("not JSON (") + e.what() + ")", skip, skipped);
  }
  return std::nullopt;
}

/// The string field `name` of `j`, or nullopt after bad_line when it is missing or not a string.
inline std::optional<std::string> string_field(const char* who, const nlohmann::json& j, const std::string& name,
                                               const std::string& where, bool skip, int64_t& skipped) {
  if (j.contains(name) && j[name].is_string()) return j[name].get<std::string>();
  bad_line(who, where, "expected a string field \"" + name + "\"", skip, skipped);
  return std::nullopt;
}

}  // namespace llmtrain::data::detail
