// tokenizer.json read into the byte-level BPE engine (byte_bpe.h): the vocabulary and merges of its
// model, the patterns of its pre-tokenizer turned from the regex dialect of Hugging Face's tokenizers
// into PCRE2's, and its added tokens, extracted from the text before the rest is merged.
#include "llmtrain/tokenizer/hf_tokenizer.h"

#include <algorithm>
#include <climits>
#include <map>

#include "../core/json.h"
#include "byte_bpe.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "pieces.h"

namespace llmtrain::tokenizer {
namespace {

using json::Json;

// A pattern of tokenizers (Oniguruma's dialect) in PCRE2's: \s and \S spelled out as White_Space, as
// Oniguruma means them (PCRE2's \s adds U+180E). Other escapes and constructs mean the same in both.
std::string pcre2_pattern(const std::string& p, const std::string& where) {
  const std::string ws = detail::kWhiteSpaceMembers;
  std::string out;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's') out += in_class ? ws : "[" + ws + "]";
      else if (e == 'S' && !in_class) out += "[^" + ws + "]";
      else if (e == 'S') LLMTRAIN_CHECK(false, where, ": \\S inside a character class is not supported");
      else out += std::string{c, e};
      continue;
    }
    if (c == '[' && !in_class) in_class = true;
    else if (c == ']' && in_class && out.back() != '[' && !(out.back() == '^' && out[out.size() - 2] == '['))
      in_class = false;
    out += c;
  }
  return out;
}

// A token's text from tokenizer_config.json's bos_token / eos_token: a string, {"content": ...}, or null.
std::optional<std::string> config_token(const Json& config, const char* key, const std::string& path) {
  if (!config.contains(key) || config[key].is_null()) return std::nullopt;
  const Json& v = config[key];
  if (v.is_string()) return v.get<std::string>();
  LLMTRAIN_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(), path, ": ", key,
                 " must be a string or an object with content, got ", json::excerpt(v));
  return v["content"].get<std::string>();
}

}  // namespace

struct HFTokenizer::Impl {
  std::unique_ptr<detail::ByteBPE> bpe;
  std::vector<std::string> bytes_of;
  struct Added {
    std::string text;
    int32_t id;
    bool special;
  };
  std::vector<Added> added;  // longest text first: at one place the longest wins
  std::optional<int32_t> bos, eos;
  bool nfc = false;  // the text between added tokens is put in Unicode's NFC first

  // Appends the ids of `text`: added tokens (special ones only when `allow_special`) become their ids,
  // the stretches between go through the BPE.
  void encode(std::string_view text, bool allow_special, std::vector<int32_t>& out) const {
    std::vector<size_t> next(added.size());
    const auto find = [&](size_t k, size_t from) {
      return (added[k].special && !allow_special) ? std::string_view::npos : text.find(added[k].text, from);
    };
    for (size_t k = 0; k < added.size(); ++k) next[k] = find(k, 0);
    for (size_t start = 0;;) {
      size_t best = std::string_view::npos, which = 0;
      for (size_t k = 0; k < added.size(); ++k) {
        if (next[k] != std::string_view::npos && next[k] < start) next[k] = find(k, start);  // passed over
        if (next[k] < best) best = next[k], which = k;  // the first; at one place the longest (sorted)
      }
      const std::string_view part = text.substr(start, best == std::string_view::npos ? best : best - start);
      if (!part.empty()) bpe->encode_ordinary(nfc ? std::string_view(detail::to_nfc(part)) : part, out);
      if (best == std::string_view::npos) return;
      out.push_back(added[which].id);
      start = best + added[which].text.size();
    }
  }
};

HFTokenizer::HFTokenizer(const std::string& path, const std::string& config_path) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  const Json doc = json::parse_file(path, uint64_t(1) << 30);
  const json::Object top(doc, path);
  const json::Object model = top.object("model");
  const auto refuse = [&](const std::string& key, const Json& value, const std::string& supported) {
    LLMTRAIN_CHECK(false, path, ": ", key, " ", json::excerpt(value), " is not supported (", supported, ")");
  };
  const std::string type = model.has("type") ? model.string("type") : "";
  if (type != "BPE") refuse("model.type", model.has("type") ? model.at("type") : Json(), "BPE");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix", "dropout"})
    if (model.has(key) && !model.at(key).is_null()) refuse(std::string("model.") + key, model.at(key), "null");
  if (model.has("byte_fallback") && model.boolean("byte_fallback"))
    refuse("model.byte_fallback", model.at("byte_fallback"), "false: a byte-level BPE");
  const bool ignore_merges = model.has("ignore_merges") && model.boolean("ignore_merges");
  if (top.has("normalizer") && !top.at("normalizer").is_null()) {  // none, or NFC (Qwen2's), alone or as a Sequence
    const Json& n = top.at("normalizer");
    const bool nfc =
        n.is_object() && (n.value("type", "") == "NFC" ||
                          (n.value("type", "") == "Sequence" && n.contains("normalizers") &&
                           n["normalizers"].is_array() && n["normalizers"].size() == 1 &&
                           n["normalizers"][0].is_object() && n["normalizers"][0].value("type", "") == "NFC"));
    if (!nfc) refuse("normalizer", n, "null, or NFC");
    LLMTRAIN_CHECK(detail::nfc_available(), path, ": normalizer NFC needs llmtrain built with ICU (libicu-dev; ",
                   "scripts/setup.sh installs it)");
    d.nfc = true;
  }

  // The pre-tokenizer's patterns, in order.
  std::vector<std::string> patterns;
  bool byte_level = false;
  const std::string gpt2_pattern =
      R"('(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";  // ByteLevel's use_regex
  const auto pre = [&](const Json& p, const std::string& key) {
    const json::Object o(p, path, key);
    const std::string kind = o.has("type") ? o.string("type") : "";
    if (kind == "ByteLevel") {
      if (o.has("add_prefix_space") && o.boolean("add_prefix_space"))
        refuse(key + ".add_prefix_space", o.at("add_prefix_space"), "false");
      if (!o.has("use_regex") || o.boolean("use_regex")) patterns.push_back(pcre2_pattern(gpt2_pattern, path));
      byte_level = true;
    } else if (kind == "Split") {
      LLMTRAIN_CHECK(!byte_level, path, ": ", key, ": a Split after the ByteLevel pre-tokenizer is not supported");
      const json::Object pattern = o.object("pattern");
      if (!pattern.has("Regex")) refuse(key + ".pattern", pattern.value(), "a Regex");
      if (o.string("behavior") != "Isolated") refuse(key + ".behavior", o.at("behavior"), "Isolated");
      if (o.has("invert") && o.boolean("invert")) refuse(key + ".invert", o.at("invert"), "false");
      patterns.push_back(pcre2_pattern(pattern.string("Regex"), path + ": " + key));
    } else if (kind == "Digits") {
      LLMTRAIN_CHECK(!byte_level, path, ": ", key, ": Digits after the ByteLevel pre-tokenizer is not supported");
      patterns.push_back(o.has("individual_digits") && o.boolean("individual_digits") ? R"(\p{N})" : R"(\p{N}+)");
    } else {
      refuse(key + ".type", o.has("type") ? o.at("type") : Json(), "ByteLevel, Split, Digits");
    }
  };
  const Json& pre_tok = top.at("pre_tokenizer");
  if (pre_tok.is_object() && pre_tok.value("type", "") == "Sequence") {
    const Json& list = json::Object(pre_tok, path, "pre_tokenizer").at("pretokenizers");
    LLMTRAIN_CHECK(list.is_array(), path, ": pre_tokenizer.pretokenizers must be a list");
    for (size_t i = 0; i < list.size(); ++i) pre(list[i], "pre_tokenizer.pretokenizers[" + std::to_string(i) + "]");
  } else {
    pre(pre_tok, "pre_tokenizer");
  }
  LLMTRAIN_CHECK(byte_level, path, ": pre_tokenizer has no ByteLevel step: not a byte-level BPE");
  if (top.has("decoder") && !top.at("decoder").is_null() && top.at("decoder").value("type", "") != "ByteLevel")
    refuse("decoder", top.at("decoder"), "ByteLevel");

  // The vocabulary, then the added tokens on top (ids past it, or ids of it given special status).
  const json::Object vocab = model.object("vocab");
  std::map<int64_t, std::string> by_id;
  for (const auto& [token, id] : vocab.value().items()) {
    LLMTRAIN_CHECK(id.is_number_integer() && id.get<int64_t>() >= 0 && id.get<int64_t>() < INT32_MAX, path,
                   ": model.vocab: the id of ", json::excerpt(token), " is not an id, got ", json::excerpt(id));
    LLMTRAIN_CHECK(by_id.emplace(id.get<int64_t>(), detail::token_bytes(token, path)).second, path,
                   ": model.vocab: id ", id.get<int64_t>(), " is given twice");
  }
  std::vector<int32_t> special;
  if (top.has("added_tokens")) {
    const Json& list = top.at("added_tokens");
    LLMTRAIN_CHECK(list.is_array(), path, ": added_tokens must be a list");
    for (size_t i = 0; i < list.size(); ++i) {
      const std::string key = "added_tokens[" + std::to_string(i) + "]";
      const json::Object a(list[i], path, key);
      const int64_t id = a.integer("id", 0, INT32_MAX - 1);
      const std::string content = a.string("content");
      for (const char* flag : {"lstrip", "rstrip", "single_word"})
        if (a.has(flag) && a.boolean(flag)) refuse(key + "." + flag, a.at(flag), "false");
      LLMTRAIN_CHECK(!content.empty(), path, ": ", key, ".content is empty");
      const auto it = by_id.find(id);
      LLMTRAIN_CHECK(it == by_id.end() || it->second == content, path, ": ", key, " gives id ", id, " to ",
                     json::excerpt(content), ", which model.vocab gives to another token");
      by_id[id] = content;
      const bool is_special = a.has("special") && a.boolean("special");
      d.added.push_back({content, int32_t(id), is_special});
      special.push_back(int32_t(id));
    }
  }
  LLMTRAIN_CHECK(!by_id.empty(), path, ": model.vocab is empty");
  const int64_t size = by_id.rbegin()->first + 1;
  LLMTRAIN_CHECK(size == int64_t(by_id.size()), path, ": the ids of model.vocab and added_tokens leave gaps (",
                 by_id.size(), " tokens, the largest id ", size - 1, ")");
  d.bytes_of.reserve(size_t(size));
  for (auto& [id, bytes] : by_id) d.bytes_of.push_back(std::move(bytes));
  std::stable_sort(d.added.begin(), d.added.end(),
                   [](const Impl::Added& a, const Impl::Added& b) { return a.text.size() > b.text.size(); });

  std::vector<detail::ByteBPE::Merge> merges;
  const Json& list = model.at("merges");
  LLMTRAIN_CHECK(list.is_array(), path, ": model.merges must be a list");
  merges.reserve(list.size());
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& m = list[i];
    const std::string where = path + ": model.merges[" + std::to_string(i) + "] " + json::excerpt(m);
    std::string left, right;
    if (m.is_string()) {  // "a b"
      const std::string s = m.get<std::string>();
      const size_t space = s.find(' ');
      LLMTRAIN_CHECK(space != std::string::npos && s.find(' ', space + 1) == std::string::npos, where,
                     ": expected two tokens separated by one space");
      left = s.substr(0, space), right = s.substr(space + 1);
    } else {  // ["a", "b"]
      LLMTRAIN_CHECK(m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string(), where,
                     ": expected \"a b\" or [\"a\", \"b\"]");
      left = m[0].get<std::string>(), right = m[1].get<std::string>();
    }
    merges.push_back({detail::token_bytes(left, path), detail::token_bytes(right, path), where});
  }
  d.bpe = std::make_unique<detail::ByteBPE>(d.bytes_of, special, merges, patterns, ignore_merges, path);

  // bos: what the post-processor's template starts every encoding with (Llama 3's <|begin_of_text|>;
  // none for Qwen2 and SmolLM2, whose configs name a bos_token that transformers never adds), unless
  // tokenizer_config.json's add_bos_token says otherwise. eos: its eos_token, else <|endoftext|>.
  const auto id_of = [&](const std::string& text, const std::string& what) {
    for (const auto& a : d.added)
      if (a.text == text) return a.id;
    LLMTRAIN_CHECK(false, what, " ", json::excerpt(text), " is not an added token of ", path);
    return int32_t(0);
  };
  const Json& post = top.has("post_processor") ? top.at("post_processor") : Json();
  std::vector<Json> processors = {post};
  if (post.is_object() && post.value("type", "") == "Sequence" && post.contains("processors") &&
      post["processors"].is_array())
    processors.assign(post["processors"].begin(), post["processors"].end());
  for (const Json& p : processors)
    if (p.is_object() && p.value("type", "") == "TemplateProcessing" && p.contains("single") &&
        p["single"].is_array() && !p["single"].empty() && p["single"][0].contains("SpecialToken"))
      d.bos = id_of(p["single"][0]["SpecialToken"].value("id", ""), path + ": post_processor's first token");
  for (const auto& a : d.added)
    if (a.text == "<|endoftext|>") d.eos = a.id;
  if (!config_path.empty()) {
    const Json config = json::parse_file(config_path, uint64_t(64) << 20);
    LLMTRAIN_CHECK(config.is_object(), config_path, ": expected a JSON object");
    if (const auto eos = config_token(config, "eos_token", config_path))
      d.eos = id_of(*eos, config_path + ": eos_token");
    if (config.contains("add_bos_token")) {
      LLMTRAIN_CHECK(config["add_bos_token"].is_boolean(), config_path, ": add_bos_token must be true or false, got ",
                     json::excerpt(config["add_bos_token"]));
      const auto bos = config_token(config, "bos_token", config_path);
      LLMTRAIN_CHECK(!config["add_bos_token"].get<bool>() || bos, config_path,
                     ": add_bos_token is true but bos_token names no token");
      d.bos = config["add_bos_token"].get<bool>() ? std::optional<int32_t>(id_of(*bos, config_path + ": bos_token"))
                                                  : std::nullopt;
    }
  }
}

HFTokenizer::~HFTokenizer() = default;

std::vector<std::string> HFTokenizer::files_in(const std::string& dir) {
  LLMTRAIN_CHECK(fs::exists(dir + "/tokenizer.json"), "Hugging Face tokenizer: ", dir, " holds no tokenizer.json");
  std::vector<std::string> files = {dir + "/tokenizer.json"};
  if (fs::exists(dir + "/tokenizer_config.json")) files.push_back(dir + "/tokenizer_config.json");
  return files;
}

std::unique_ptr<HFTokenizer> HFTokenizer::from_dir(const std::string& dir) {
  const auto files = files_in(dir);
  return std::make_unique<HFTokenizer>(files[0], files.size() > 1 ? files[1] : "");
}

std::vector<int32_t> HFTokenizer::encode(std::string_view text, bool allow_special) const {
  detail::check_encodable(text, "HFTokenizer");
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 1);
  impl_->encode(text, allow_special, out);
  return out;
}

std::string HFTokenizer::decode(const std::vector<int32_t>& ids) const {
  return detail::join_pieces(impl_->bytes_of, ids, "HFTokenizer");
}

int64_t HFTokenizer::vocab_size() const { return int64_t(impl_->bytes_of.size()); }
std::optional<int32_t> HFTokenizer::eot_id() const { return impl_->eos; }
std::optional<std::string> HFTokenizer::eot_text() const {
  return impl_->eos ? std::optional<std::string>(impl_->bytes_of[size_t(*impl_->eos)]) : std::nullopt;
}
std::optional<int32_t> HFTokenizer::bos_id() const { return impl_->bos; }
std::optional<std::string> HFTokenizer::bos_text() const {
  return impl_->bos ? std::optional<std::string>(impl_->bytes_of[size_t(*impl_->bos)]) : std::nullopt;
}

std::optional<int32_t> HFTokenizer::added_token(const std::string& text) const {
  for (const auto& a : impl_->added)
    if (a.text == text) return a.id;
  return std::nullopt;
}

}  // namespace llmtrain::tokenizer
