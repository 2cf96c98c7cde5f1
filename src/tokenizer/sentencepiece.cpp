#include "llmtrain/tokenizer/sentencepiece.h"

#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <unordered_map>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "pieces.h"

namespace llmtrain::tokenizer {

struct SentencePiece::Impl {
  sentencepiece::SentencePieceProcessor sp;
  std::vector<std::string> bytes_of;  // id -> the bytes it decodes to ("" for control pieces)
  bool dummy_prefix = false;          // the model prepends a space to every text it encodes
  std::optional<int32_t> eos;
};

SentencePiece::SentencePiece(const std::string& model_path) : impl_(std::make_unique<Impl>()) {
  LLMTRAIN_CHECK(fs::exists(model_path), "SentencePiece model ", model_path, " does not exist");
  const auto status = impl_->sp.Load(model_path);
  LLMTRAIN_CHECK(status.ok(), "SentencePiece model ", model_path, " could not be loaded: ", status.ToString());
  auto& sp = impl_->sp;
  const int n = sp.GetPieceSize();
  impl_->bytes_of.resize(n);
  for (int id = 0; id < n; ++id) {
    if (sp.IsControl(id)) continue;
    std::string piece = sp.IdToPiece(id);
    if (sp.IsByte(id)) {  // "<0xE2>"
      impl_->bytes_of[id] = std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
      continue;
    }
    if (sp.IsUnknown(id)) piece = " \xE2\x81\x87 ";  // what SentencePiece prints for <unk>
    std::string text;
    for (size_t i = 0; i < piece.size();) {  // "▁" (U+2581) stands for a space
      if (piece.compare(i, 3, "\xE2\x96\x81") == 0) {
        text += ' ';
        i += 3;
      } else {
        text += piece[i++];
      }
    }
    impl_->bytes_of[id] = text;
  }
  std::vector<int> probe;
  sp.Encode("a", &probe);
  impl_->dummy_prefix = !probe.empty() && !impl_->bytes_of[probe[0]].empty() && impl_->bytes_of[probe[0]][0] == ' ';
  if (sp.eos_id() >= 0) impl_->eos = sp.eos_id();
}

SentencePiece::~SentencePiece() = default;

std::vector<int32_t> SentencePiece::encode(std::string_view text, bool allow_special) const {
  std::vector<int32_t> out;
  const auto plain = [&](std::string_view part, std::vector<int32_t>& o) {
    std::vector<int> ids;
    const auto status = impl_->sp.Encode(part, &ids);
    LLMTRAIN_CHECK(status.ok(), "SentencePiece::encode: ", status.ToString());
    o.insert(o.end(), ids.begin(), ids.end());
  };
  if (allow_special && impl_->eos)
    detail::encode_with_special(text, impl_->sp.IdToPiece(*impl_->eos), *impl_->eos, plain, out);
  else
    plain(text, out);
  return out;
}

std::string SentencePiece::decode(const std::vector<int32_t>& ids) const {
  std::string out = detail::join_pieces(impl_->bytes_of, ids, "SentencePiece");
  if (impl_->dummy_prefix && !out.empty() && out[0] == ' ') out.erase(0, 1);
  return out;
}

int64_t SentencePiece::vocab_size() const { return int64_t(impl_->bytes_of.size()); }

std::optional<int32_t> SentencePiece::eot_id() const { return impl_->eos; }

void train_sentencepiece(const SentencePieceTrainOptions& o) {
  LLMTRAIN_CHECK(!o.inputs.empty(), "train_sentencepiece: no input files");
  for (const auto& in : o.inputs) LLMTRAIN_CHECK(fs::exists(in), "train_sentencepiece: input ", in, " does not exist");
  LLMTRAIN_CHECK(!o.model_prefix.empty(), "train_sentencepiece: model_prefix is empty");
  LLMTRAIN_CHECK(o.model_type == "bpe" || o.model_type == "unigram", "train_sentencepiece: model_type \"",
                 o.model_type, "\" is neither bpe nor unigram");
  LLMTRAIN_CHECK(o.vocab_size >= 16, "train_sentencepiece: vocab_size ", o.vocab_size, " is below 16");
  if (const size_t slash = o.model_prefix.rfind('/'); slash != std::string::npos && slash > 0)
    fs::make_dirs(o.model_prefix.substr(0, slash));  // SentencePiece writes there but does not create it
  std::string inputs;
  for (const auto& in : o.inputs) {
    LLMTRAIN_CHECK(in.find(',') == std::string::npos, "train_sentencepiece: input ", in,
                   " has a comma in its name, which SentencePiece reads as a list separator");
    inputs += (inputs.empty() ? "" : ",") + in;
  }
  std::unordered_map<std::string, std::string> args = {
      {"input", inputs},
      {"model_prefix", o.model_prefix},
      {"model_type", o.model_type},
      {"vocab_size", std::to_string(o.vocab_size)},
      {"character_coverage", std::to_string(o.character_coverage)},
      {"byte_fallback", o.byte_fallback ? "true" : "false"},
      {"max_sentence_length", std::to_string(o.max_line_bytes)},
      {"minloglevel", "1"}};
  if (o.max_sentences > 0) {
    args["input_sentence_size"] = std::to_string(o.max_sentences);
    args["shuffle_input_sentence"] = "true";
  }
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  LLMTRAIN_CHECK(status.ok(), "train_sentencepiece: ", status.ToString(),
                 status.ToString().find("sentences_.empty()") != std::string::npos
                     ? " (no usable lines: every line was empty or longer than max_line_bytes)"
                     : "");
}

}  // namespace llmtrain::tokenizer
