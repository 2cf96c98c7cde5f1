// GPT-2's tokenizer: its files read into the byte-level BPE engine (byte_bpe.h) with GPT-2's
// pre-tokenisation pattern, and its one special token.
#include "llmtrain/tokenizer/gpt2_bpe.h"

#include <climits>
#include <sstream>

#include "../core/json.h"
#include "byte_bpe.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "pieces.h"

namespace llmtrain::tokenizer {
namespace {

// GPT-2's pattern, \s spelled out as White_Space.
std::string gpt2_pattern() {
  const std::string ws = detail::kWhiteSpaceMembers;
  return R"('(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\p{L}\p{N})" + ws + "]+|[" + ws + "]+(?![^" + ws + "])|[" + ws +
         "]+";
}

}  // namespace

struct GPT2BPE::Impl {
  std::unique_ptr<detail::ByteBPE> bpe;
  std::optional<int32_t> eot;
};

GPT2BPE::GPT2BPE(const std::string& vocab_json_path, const std::string& merges_path) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  const json::Json vocab = json::parse_file(vocab_json_path, uint64_t(256) << 20);
  LLMTRAIN_CHECK(vocab.is_object() && !vocab.empty(), vocab_json_path, ": expected a JSON object of token -> id");
  std::vector<std::string> bytes_of(vocab.size());
  std::vector<bool> seen(vocab.size(), false);
  for (const auto& [token, id_json] : vocab.items()) {
    LLMTRAIN_CHECK(id_json.is_number_integer(), vocab_json_path, ": id of ", json::excerpt(token),
                   " is not an integer");
    const int64_t id = id_json.get<int64_t>();
    LLMTRAIN_CHECK(id >= 0 && id < int64_t(vocab.size()) && !seen[id], vocab_json_path, ": id ", id, " of ",
                   json::excerpt(token), " is repeated or outside [0, ", vocab.size(), ")");
    seen[id] = true;
    bytes_of[id] = token == kEndOfText ? token : detail::token_bytes(token, vocab_json_path);
    if (token == kEndOfText) d.eot = static_cast<int32_t>(id);
  }
  std::istringstream merges(fs::read_file(merges_path, uint64_t(256) << 20));
  std::string line;
  std::vector<detail::ByteBPE::Merge> rules;
  for (int64_t line_no = 1; std::getline(merges, line); ++line_no) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (line_no == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    LLMTRAIN_CHECK(space != std::string::npos && line.find(' ', space + 1) == std::string::npos, merges_path, ":",
                   line_no, ": expected two tokens separated by one space, got ", json::excerpt(line));
    rules.push_back({detail::token_bytes(line.substr(0, space), merges_path),
                     detail::token_bytes(line.substr(space + 1), merges_path),
                     merges_path + ":" + std::to_string(line_no) + ": merge " + json::excerpt(line)});
  }
  std::vector<int32_t> special;
  if (d.eot) special.push_back(*d.eot);
  LLMTRAIN_CHECK(!rules.empty(), merges_path, ": no merges");
  d.bpe =
      std::make_unique<detail::ByteBPE>(std::move(bytes_of), special, rules, std::vector<std::string>{gpt2_pattern()},
                                        /*whole_first=*/true, vocab_json_path);
}

GPT2BPE::~GPT2BPE() = default;

std::pair<std::string, std::string> GPT2BPE::files_in(const std::string& dir) {
  for (const auto& [vocab, merges] : {std::pair{"encoder.json", "vocab.bpe"}, {"vocab.json", "merges.txt"}})
    if (fs::exists(dir + "/" + vocab) && fs::exists(dir + "/" + merges)) return {dir + "/" + vocab, dir + "/" + merges};
  LLMTRAIN_CHECK(false, "GPT-2 tokenizer: ", dir,
                 " holds neither encoder.json + vocab.bpe (OpenAI) nor vocab.json + merges.txt (Hugging Face)");
  return {};
}

std::unique_ptr<GPT2BPE> GPT2BPE::from_dir(const std::string& dir) {
  const auto [vocab, merges] = files_in(dir);
  return std::make_unique<GPT2BPE>(vocab, merges);
}

std::vector<int32_t> GPT2BPE::encode(std::string_view text, bool allow_special) const {
  detail::check_encodable(text, "GPT2BPE");
  std::vector<int32_t> out;
  out.reserve(text.size() / 4 + 1);
  if (!allow_special || !impl_->eot) {
    impl_->bpe->encode_ordinary(text, out);
    return out;
  }
  detail::encode_with_special(
      text, {{kEndOfText, *impl_->eot}},
      [&](std::string_view part, std::vector<int32_t>& o) { impl_->bpe->encode_ordinary(part, o); }, out);
  return out;
}

std::string GPT2BPE::decode(const std::vector<int32_t>& ids) const {
  return detail::join_pieces(impl_->bpe->bytes_of(), ids, "GPT2BPE");
}

int64_t GPT2BPE::vocab_size() const { return int64_t(impl_->bpe->bytes_of().size()); }

std::optional<int32_t> GPT2BPE::eot_id() const { return impl_->eot; }
std::optional<std::string> GPT2BPE::eot_text() const {
  return impl_->eot ? std::optional<std::string>(kEndOfText) : std::nullopt;
}

}  // namespace llmtrain::tokenizer
