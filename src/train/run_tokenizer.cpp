// The tokenizer a run was trained with, carried in its folder and each checkpoint (copied in, named by
// a path relative to the folder and checked by its SHA-256), so that a run folder stands on its own.
#include "../core/sha256.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/train/config.h"

namespace llmtrain::train {
namespace {

std::string base_name(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string joined(const std::vector<std::string>& files) {
  std::string out;
  for (const auto& f : files) out += (out.empty() ? "" : " + ") + f;
  return out;
}

}  // namespace

std::string tokenizer_sha256(const TokenizerConfig& t) {
  return detail::sha256_files(tokenizer::tokenizer_files(t.kind, t.path));
}

std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const TokenizerConfig& t) {
  if (!t.sha256.empty()) {
    std::vector<std::string> files;
    try {
      files = tokenizer::tokenizer_files(t.kind, t.path);
      for (const auto& f : files) LLMTRAIN_CHECK(fs::exists(f), f, " is missing");
    } catch (const llmtrain::Error& e) {
      LLMTRAIN_CHECK(false, "the tokenizer of this model (", t.kind, " ", t.path, ", sha256 ", t.sha256,
                     ") cannot be found: ", e.what());
    }
    const std::string have = detail::sha256_files(files);
    LLMTRAIN_CHECK(have == t.sha256, "the tokenizer files ", joined(files), " have changed: their sha256 is ", have,
                   ", expected ", t.sha256, " (the tokenizer the model was trained with)");
  }
  return tokenizer::load_tokenizer(t.kind, t.path);
}

std::string copied_tokenizer_path(const std::string& kind) {
  return kind == "sentencepiece" ? "tokenizer/tokenizer.model" : "tokenizer";
}

TokenizerConfig copy_tokenizer(const TokenizerConfig& t, const std::string& dir) {
  const auto files = tokenizer::tokenizer_files(t.kind, t.path);
  TokenizerConfig copy;
  copy.kind = t.kind;
  copy.path = copied_tokenizer_path(t.kind);
  fs::make_dirs(dir + "/tokenizer");
  std::vector<std::string> copied;
  for (const auto& f : files) {
    const std::string to = dir + "/tokenizer/" + (t.kind == "sentencepiece" ? "tokenizer.model" : base_name(f));
    fs::write_file_atomic(to, fs::read_file(f, uint64_t(1) << 30, "tokenizer"));
    copied.push_back(to);
  }
  copy.sha256 = detail::sha256_files(copied);
  LLMTRAIN_CHECK(t.sha256.empty() || copy.sha256 == t.sha256, "the tokenizer files ", joined(files),
                 " have changed: their sha256 is ", copy.sha256, ", expected ", t.sha256);
  return copy;
}

}  // namespace llmtrain::train
