// tokenizer.json (HFTokenizer) against Hugging Face's tokenizers (tests/python/tokenizers_peer.py):
// byte-level BPEs that tokenizers trains here on the State of the Union corpus, with the pre-tokenizers
// of Llama 3, Qwen2 (with its NFC normalizer), SmolLM2 and GPT-2, give the same ids on the corpus and
// the hard strings, with and without their special tokens read as such; and files of other kinds are
// refused by key.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/tokenizer/hf_tokenizer.h"
#include "test_util.h"
#include "tokenizer/hard_strings.h"

using llmtrain::tokenizer::HFTokenizer;
namespace lt = llmtrain::testing;

namespace {

int peer(const std::string& args) {
  const std::string cmd =
      "'" + lt::test_python() + "' '" + lt::test_source_dir() + "/tests/python/tokenizers_peer.py' " + args;
  return lt::run_command(cmd);
}

}  // namespace

TEST(HFTokenizer, MatchesTokenizersForEachFamilysPreTokenizer) {
  LLMTRAIN_REQUIRE_DATA_DIR(data);
  const auto corpus = lt::sotu_files(data);
  std::string files;
  for (size_t i = 0; i < corpus.size(); i += 8) files += " '" + corpus[i] + "'";  // a corpus to train on
  std::vector<std::string> texts = lt::kHardStrings;
  for (const auto& f : corpus) texts.push_back(llmtrain::fs::read_file(f));  // every address, whole
  texts.push_back("<|begin_of_text|>Hi<|eot_id|><|im_start|>user\nA <custom> one<|im_end|>\n<|endoftext|>");
  texts.push_back("digits 1234567 and 12 345, 3.14159; x<|end_of_text|>y");
  // Decomposed forms that NFC composes (e + combining acute, Hangul jamo, A + ring), and one it keeps (ﬁ).
  texts.push_back("caf\x65\xCC\x81 \xE1\x84\x80\xE1\x85\xA1 \x41\xCC\x8A and \xEF\xAC\x81ne<|im_end|>\x65\xCC\x81");
  for (const std::string kind : {"llama3", "qwen2", "smollm2", "gpt2"}) {
    SCOPED_TRACE(kind);
    lt::TempDir dir;
    ASSERT_EQ(peer("train " + kind + " '" + dir.path + "'" + files), 0);
    std::ofstream(dir.path + "/texts.json") << nlohmann::json(texts).dump();
    ASSERT_EQ(peer("encode '" + dir.path + "' '" + dir.path + "/texts.json' '" + dir.path + "/ids.json'"), 0);
    const auto want = nlohmann::json::parse(llmtrain::fs::read_file(dir.path + "/ids.json"));
    const auto tok = HFTokenizer::from_dir(dir.path);
    EXPECT_EQ(tok->vocab_size(), 3001);  // 3000 and the added <custom>
    for (size_t i = 0; i < texts.size(); ++i) {
      const auto ids = tok->encode(texts[i], /*allow_special=*/true);
      EXPECT_EQ(ids, want["ids"][i].get<std::vector<int32_t>>()) << "text #" << i << ": " << texts[i].substr(0, 40);
      EXPECT_EQ(tok->encode(texts[i]), want["plain"][i].get<std::vector<int32_t>>()) << "text #" << i;
      EXPECT_EQ(tok->decode(ids), want["normal"][i].get<std::string>()) << "text #" << i;  // NFC for Qwen2
    }
    // Without tokenizer_config.json: Llama 3's bos from its post-processor, eos <|endoftext|>.
    const auto llama3_bos = kind == "llama3" ? tok->added_token("<|begin_of_text|>") : std::nullopt;
    EXPECT_EQ(tok->eot_id(), tok->added_token("<|endoftext|>"));
    EXPECT_EQ(tok->bos_id(), llama3_bos);
    // With one, its eos_token; a bos_token alone adds nothing that the post-processor does not (as
    // transformers: SmolLM2 names one it never adds).
    std::ofstream(dir.path + "/tokenizer_config.json")
        << R"({"bos_token": "<|begin_of_text|>", "eos_token": {"content": "<|eot_id|>"}})";
    const auto configured = HFTokenizer::from_dir(dir.path);
    EXPECT_EQ(configured->bos_id(), llama3_bos);
    EXPECT_EQ(configured->eot_id(), configured->added_token("<|eot_id|>"));
    // add_bos_token decides where it is given.
    for (const bool add : {true, false}) {
      std::ofstream(dir.path + "/tokenizer_config.json")
          << R"({"bos_token": "<|begin_of_text|>", "add_bos_token": )" << (add ? "true" : "false") << "}";
      EXPECT_EQ(HFTokenizer::from_dir(dir.path)->bos_id(),
                add ? configured->added_token("<|begin_of_text|>") : std::nullopt);
    }
    EXPECT_EQ(configured->eot_text(), "<|eot_id|>");
    std::ofstream(dir.path + "/tokenizer_config.json") << R"({"add_bos_token": true})";
    lt::expect_error([&] { HFTokenizer::from_dir(dir.path); }, {"tokenizer_config.json", "add_bos_token"});
  }
}

TEST(HFTokenizer, FilesOfOtherKindsAreRefusedByKey) {
  lt::TempDir dir;
  const std::string path = dir.path + "/tokenizer.json";
  const auto refused = [&](const std::string& text, std::initializer_list<std::string> parts) {
    std::ofstream(path) << text;
    lt::expect_error([&] { HFTokenizer t(path); }, parts);
  };
  const std::string bpe = R"("model": {"type": "BPE", "vocab": {"a": 0}, "merges": []})";
  const std::string byte_level = R"("pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false})";
  refused(R"({"model": {"type": "Unigram", "vocab": []}, )" + byte_level + "}",
          {"tokenizer.json: model.type", "Unigram", "(BPE)"});
  refused("{" + bpe + R"(, "normalizer": {"type": "NFKC"}, )" + byte_level + "}", {"normalizer", "NFKC"});
  refused("{" + bpe + R"(, "pre_tokenizer": {"type": "Metaspace"}})", {"pre_tokenizer.type", "Metaspace"});
  refused("{" + bpe + R"(, "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": true}})",
          {"pre_tokenizer.add_prefix_space"});
  refused("{" + bpe + R"(, "pre_tokenizer": {"type": "Sequence", "pretokenizers": [{"type": "Split", )" +
              R"("pattern": {"Regex": "a"}, "behavior": "Removed"}, {"type": "ByteLevel"}]}})",
          {"pre_tokenizer.pretokenizers[0].behavior", "Removed", "(Isolated)"});
  refused("{" + bpe + ", " + byte_level + R"(, "added_tokens": [{"id": 1, "content": "<x>", "lstrip": true}]})",
          {"added_tokens[0].lstrip"});
  // A vocabulary without every byte is no byte-level BPE.
  refused("{" + bpe + ", " + byte_level + "}", {"no token for byte"});
  lt::expect_error([&] { HFTokenizer::from_dir(dir.path + "/none"); }, {"holds no tokenizer.json"});
}
