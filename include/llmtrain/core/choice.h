// A value that a config or a file names with one of a fixed set of words, held as its enum: parsed
// once, where it is read, and compared, switched on and written back by name everywhere else. Each
// enum used so declares, beside itself, the one table of its names:
//   enum class Rounding { kStochastic, kNearest };
//   inline const ChoiceNames<Rounding>& choice_names(Rounding) {
//     static const ChoiceNames<Rounding> names{{Rounding::kStochastic, "stochastic"}, {Rounding::kNearest, "nearest"}};
//     return names;
//   }
//   Choice<Rounding> r = Choice<Rounding>::parse("nearest", "rounding");  // r == Rounding::kNearest, r == "nearest"
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "llmtrain/core/error.h"

namespace llmtrain {

template <typename E>
using ChoiceNames = std::vector<std::pair<E, const char*>>;

template <typename E>
class Choice {
 public:
  Choice(E value) : value_(value) {}  // implicit, as the enum itself converts
  operator E() const { return value_; }
  E value() const { return value_; }

  /// The word for the value.
  const char* name() const {
    for (const auto& [value, name] : choice_names(E{}))
      if (value == value_) return name;
    return "?";
  }

  /// The words, "a, b or c"; without `leave_out`'s where given (a value one may not name there).
  static std::string names(std::optional<E> leave_out = std::nullopt) {
    std::vector<const char*> words;
    for (const auto& [value, name] : choice_names(E{}))
      if (value != leave_out) words.push_back(name);
    std::string out;
    for (size_t i = 0; i < words.size(); ++i)
      out += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + std::string(words[i]);
    return out;
  }

  /// The value `word` names; false when it names none.
  static bool find(const std::string& word, E* out) {
    for (const auto& [value, name] : choice_names(E{}))
      if (word == name) return *out = value, true;
    return false;
  }

  /// Throws llmtrain::Error `<what> "<word>" is not one of a, b or c` when `word` names no value.
  static Choice parse(const std::string& word, const char* what) {
    E value{};
    LLMTRAIN_CHECK(find(word, &value), what, " \"", word, "\" is not one of ", names());
    return value;
  }

  friend bool operator==(const Choice& c, const std::string& word) { return word == c.name(); }
  friend bool operator==(const std::string& word, const Choice& c) { return word == c.name(); }
  friend bool operator==(const Choice& c, const char* word) { return std::string(word) == c.name(); }
  friend bool operator!=(const Choice& c, const std::string& word) { return !(c == word); }
  friend bool operator!=(const Choice& c, const char* word) { return !(c == word); }
  friend std::ostream& operator<<(std::ostream& os, const Choice& c) { return os << c.name(); }

 private:
  E value_;
};

}  // namespace llmtrain
