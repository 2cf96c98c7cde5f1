// JSONL for the data readers: files read line by line with a bound on a line's length (a file with no
// newline would otherwise be read into one string), and a line that is not a JSON object, or lacks what
// the reader needs, either fails naming file:line, or is counted and skipped when the caller allows it.
#pragma once

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

#include "../core/json.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"

namespace llmtrain::data::detail {

/// The longest line a JSONL reader takes: far above any document, far below what exhausts memory.
constexpr size_t kMaxLineBytes = size_t(256) << 20;

/// The lines of a regular file, each at most kMaxLineBytes ("\n" ends a line, "\r\n" too).
///   LineReader in(path, "SFT");  std::string line;  while (in.next(line)) use(line, in.line_no());
class LineReader {
 public:
  LineReader(const std::string& path, const char* who) : path_(path), who_(who) {
    uint64_t size = 0;
    fd_ = fs::open_regular(path, &size, std::string(who) + ":");
  }
  ~LineReader() { ::close(fd_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  /// The next line, without its end; false at the end of the file.
  bool next(std::string& line) {
    line.clear();
    bool any = false;
    for (;;) {
      if (pos_ == buf_.size() && !fill()) {
        if (!any) return false;
        break;
      }
      const size_t nl = buf_.find('\n', pos_);
      const size_t end = nl == std::string::npos ? buf_.size() : nl;
      LLMTRAIN_CHECK(line.size() + (end - pos_) <= kMaxLineBytes, who_, ": ", path_, ":", line_no_ + 1,
                     ": a line longer than ", kMaxLineBytes, " bytes");
      line.append(buf_, pos_, end - pos_);
      any = true;
      pos_ = end;
      if (nl != std::string::npos) {
        ++pos_;
        break;
      }
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    ++line_no_;
    return true;
  }
  int64_t line_no() const { return line_no_; }

 private:
  // Reads the next piece of the file into buf_; false at its end.
  bool fill() {
    buf_.resize(1 << 16);
    pos_ = 0;
    for (;;) {
      const ssize_t n = ::read(fd_, buf_.data(), buf_.size());
      if (n < 0 && errno == EINTR) continue;
      LLMTRAIN_CHECK(n >= 0, who_, ": ", path_, ": cannot read (", std::strerror(errno), ")");
      buf_.resize(size_t(n));
      return n > 0;
    }
  }
  std::string path_;
  const char* who_;
  int fd_ = -1;
  std::string buf_;
  size_t pos_ = 0;
  int64_t line_no_ = 0;
};

/// Fails (or counts, when `skip`) a bad line; `who` names the reader in the message.
inline void bad_line(const char* who, const std::string& where, const std::string& what, bool skip, int64_t& skipped) {
  LLMTRAIN_CHECK(skip, who, ": ", where, ": ", what, " (--skip-bad-lines skips such lines)");
  ++skipped;
}

/// The line's JSON object; nullopt for a blank line or a skipped bad one.
inline std::optional<json::Json> parse_object(const char* who, const std::string& line, const std::string& where,
                                              bool skip, int64_t& skipped) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return std::nullopt;
  try {
    auto j = json::parse(line, "line");
    if (j.is_object()) return j;
    bad_line(who, where, "not a JSON object", skip, skipped);
  } catch (const llmtrain::Error& e) {
    bad_line(who, where, e.what(), skip, skipped);
  }
  return std::nullopt;
}

/// The string field `name` of `j`, or nullopt after bad_line when it is missing or not a string.
inline std::optional<std::string> string_field(const char* who, const json::Json& j, const std::string& name,
                                               const std::string& where, bool skip, int64_t& skipped) {
  if (j.contains(name) && j[name].is_string()) return j[name].get<std::string>();
  bad_line(who, where, "expected a string field \"" + name + "\"", skip, skipped);
  return std::nullopt;
}

}  // namespace llmtrain::data::detail
