// Chat formats (llmtrain/data/chat.h) against transformers' apply_chat_template (tests/python/chat_peer.py,
// with templates the test writes for each format): the same text for each conversation, with and without
// the generation prompt; for Llama 3 and ChatML, over byte-level BPEs that tokenizers trains here, the
// same ids and the same assistant-token mask, and SFT examples from messages lines whose targets are
// exactly the masked tokens. Formats are found from a folder's tokenizer_config.json; unknown roles,
// turns out of order and tokenizers without the format's special tokens are refused by name.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/core/types.h"
#include "llmtrain/data/chat.h"
#include "llmtrain/data/sft.h"
#include "llmtrain/tokenizer/gpt2_bpe.h"
#include "llmtrain/tokenizer/hf_tokenizer.h"
#include "test_util.h"

using llmtrain::data::ChatFormat;
using llmtrain::data::ChatMessage;
namespace lt = llmtrain::testing;
namespace data = llmtrain::data;

namespace {

int python(const std::string& script, const std::string& args, const std::string& out = "") {
  const std::string cmd = "'" + lt::test_python() + "' '" + lt::test_source_dir() + "/tests/python/" + script + "' " +
                          args + (out.empty() ? "" : " > '" + out + "'");
  return lt::run_command(cmd);
}

using Chat = std::vector<ChatMessage>;

// Conversations of each kind a format must lay out: several turns, a system message, text around the
// edges that Llama 3 trims, special tokens' texts typed by a user, non-ASCII text.
std::vector<Chat> conversations(ChatFormat f) {
  std::vector<Chat> out = {
      {{"user", "What is the capital of France?"}, {"assistant", "Paris."}},
      {{"system", "You answer in one word."},
       {"user", "Colour of the sky?"},
       {"assistant", "Blue."},
       {"user", "And grass?"},
       {"assistant", "Green, mostly."}},
      {{"user", "Write two lines.\nPlease."}, {"assistant", "Line one.\nLine two.\n\nDone."}},
      {{"user", "Translate: caf\xC3\xA9 \xE2\x80\x94 na\xC3\xAFve"},
       {"assistant", "Caf\xC3\xA9 \xE2\x80\x94 na\xC3\xAFve!"}},
      {{"system", "Be brief."}, {"user", "Say hi."}},
      {{"user", "Which comes next: 1, 2, 3?"}},
  };
  if (f != ChatFormat::kMistral) {
    out.push_back({{"system", "Rules."}, {"assistant", "I start."}, {"user", "Fine."}, {"assistant", "Good."}});
    out.push_back({{"user", "  padded question  "}, {"assistant", "\tpadded answer \n"}});
  }
  return out;
}

nlohmann::json as_json(const std::vector<Chat>& chats) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& chat : chats) {
    nlohmann::json c = nlohmann::json::array();
    for (const auto& m : chat) c.push_back({{"role", m.role}, {"content", m.content}});
    out.push_back(c);
  }
  return out;
}

std::string template_of(const char* format) {
  lt::TempDir dir;
  EXPECT_EQ(python("chat_peer.py", std::string("template ") + format, dir.path + "/t"), 0);
  return llmtrain::fs::read_file(dir.path + "/t");
}

}  // namespace

TEST(Chat, RendersAsTransformersApplyChatTemplate) {
  LLMTRAIN_REQUIRE_DATA_DIR(data_dir);
  const auto corpus = lt::sotu_files(data_dir);
  std::string files;
  for (size_t i = 0; i < corpus.size(); i += 8) files += " '" + corpus[i] + "'";
  for (const auto& [format, kind] : std::vector<std::pair<ChatFormat, std::string>>{{ChatFormat::kLlama3, "llama3"},
                                                                                    {ChatFormat::kLlama31, "llama3"},
                                                                                    {ChatFormat::kChatML, "qwen2"},
                                                                                    {ChatFormat::kQwen2, "qwen2"},
                                                                                    {ChatFormat::kQwen25, "qwen2"},
                                                                                    {ChatFormat::kSmolLM2, "qwen2"},
                                                                                    {ChatFormat::kMistral, ""}}) {
    const std::string name = llmtrain::Choice<ChatFormat>(format).name();
    SCOPED_TRACE(name);
    lt::TempDir dir;
    // A byte-level BPE with the format's special tokens (Mistral's, a SentencePiece model's, only rendered).
    if (!kind.empty()) {
      ASSERT_EQ(python("tokenizers_peer.py", "train " + kind + " '" + dir.path + "'" + files), 0);
    }
    const auto chats = conversations(format);
    std::ofstream(dir.path + "/chats.json") << as_json(chats).dump();
    ASSERT_EQ(python("chat_peer.py", "render " + name + " '" + dir.path + "' '" + dir.path + "/chats.json' '" +
                                         dir.path + "/out.json'"),
              0);
    const auto want = nlohmann::json::parse(llmtrain::fs::read_file(dir.path + "/out.json"));
    std::unique_ptr<llmtrain::tokenizer::HFTokenizer> tok;
    if (!kind.empty()) tok = llmtrain::tokenizer::HFTokenizer::from_dir(dir.path);
    for (size_t i = 0; i < chats.size(); ++i) {
      SCOPED_TRACE("conversation " + std::to_string(i));
      const auto pieces = data::render_chat(format, chats[i], false, "chat");
      EXPECT_EQ(data::chat_text(pieces), want[i]["text"].get<std::string>());
      if (want[i].contains("prompt")) {
        EXPECT_EQ(data::chat_text(data::render_chat(format, chats[i], true, "chat")),
                  want[i]["prompt"].get<std::string>());
      }
      if (!tok) continue;
      std::vector<int32_t> ids;
      std::vector<bool> trained;
      data::encode_chat(*tok, pieces, ids, trained);
      EXPECT_EQ(ids, want[i]["ids"].get<std::vector<int32_t>>());
      const auto mask = want[i]["mask"].get<std::vector<int>>();
      EXPECT_EQ(std::vector<int>(trained.begin(), trained.end()), mask);
    }
    if (!tok) continue;
    // SFT from messages lines, the format found from the folder's chat template: the targets are the
    // tokens transformers masks as the assistant's, the inputs the whole conversation.
    std::ofstream(dir.path + "/tokenizer_config.json")
        << nlohmann::json({{"chat_template", template_of(name.c_str())}}).dump();
    EXPECT_EQ(data::chat_format_in(dir.path), format);
    {
      std::ofstream jsonl(dir.path + "/chats.jsonl");
      for (const auto& c : as_json(chats)) jsonl << nlohmann::json({{"messages", c}}).dump() << "\n";
    }
    llmtrain::data::SFTOptions o;
    o.path = dir.path + "/chats.jsonl";
    o.seq_len = 256;
    o.chat_dir = dir.path;
    const data::SFTDataset sft(*tok, o);
    EXPECT_EQ(sft.chat_format(), format);
    int64_t e = 0;
    for (size_t i = 0; i < chats.size(); ++i) {
      const auto ids = want[i]["ids"].get<std::vector<int64_t>>();
      const auto mask = want[i]["mask"].get<std::vector<int>>();
      if (std::find(mask.begin() + 1, mask.end(), 1) == mask.end()) continue;  // no assistant turn: dropped
      ASSERT_LT(e, sft.size());
      const auto b = sft.batch({{e++}});
      const int64_t n = int64_t(ids.size()) - 1;
      const auto inputs = b.inputs[0].narrow(0, 0, n), targets = b.targets[0];
      EXPECT_TRUE(torch::equal(inputs, torch::tensor(std::vector<int64_t>(ids.begin(), ids.end() - 1))))
          << "conversation " << i;
      std::vector<int64_t> want_targets;
      for (int64_t k = 1; k <= n; ++k)
        want_targets.push_back(mask[size_t(k)] ? ids[size_t(k)] : llmtrain::kIgnoreIndex);
      EXPECT_TRUE(torch::equal(targets.narrow(0, 0, n), torch::tensor(want_targets))) << "conversation " << i;
      EXPECT_TRUE((targets.narrow(0, n, o.seq_len - n) == llmtrain::kIgnoreIndex).all().item<bool>());
    }
    EXPECT_EQ(e, sft.size());
    EXPECT_EQ(sft.dropped(), int64_t(chats.size()) - e);
    // A malformed message is its line's fault: named, or counted and skipped when allowed.
    std::ofstream(dir.path + "/bad.jsonl")
        << R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})"
        << "\n"
        << R"({"messages": [{"role": "user", "content": 3}]})"
        << "\n"
        << R"({"messages": [{"role": "robot", "content": "beep"}]})"
        << "\n";
    o.path = dir.path + "/bad.jsonl";
    lt::expect_error([&] { data::SFTDataset(*tok, o); }, {"bad.jsonl:2", "message 0", "\"content\""});
    o.skip_bad_lines = true;
    const data::SFTDataset skipping(*tok, o);
    EXPECT_EQ(skipping.size(), 1);
    EXPECT_EQ(skipping.skipped_lines(), 2);
    if (format != ChatFormat::kLlama3) continue;
    // Prompt and completion lines start with the bos when asked (the Llama family): off the loss.
    std::ofstream(dir.path + "/pc.jsonl") << R"({"prompt": "Two and two?", "completion": " Four."})"
                                          << "\n";
    o.path = dir.path + "/pc.jsonl";
    o.add_bos = true;
    const auto b = data::SFTDataset(*tok, o).batch({{0}});
    const auto prompt = tok->encode("Two and two?");
    EXPECT_EQ(b.inputs[0][0].item<int64_t>(), *tok->bos_id());
    EXPECT_EQ(b.inputs[0][1].item<int64_t>(), prompt[0]);
    EXPECT_EQ(b.targets[0][int64_t(prompt.size()) - 1].item<int64_t>(), llmtrain::kIgnoreIndex);
    EXPECT_EQ(b.targets[0][int64_t(prompt.size())].item<int64_t>(), tok->encode(" Four.")[0]);
  }
}

TEST(Chat, ContentIsTextAndBadConversationsAreRefusedByName) {
  // What a user types stays text: "<|eot_id|>" in a message is never the control token.
  const auto pieces = data::render_chat(ChatFormat::kLlama3, {{"user", "say <|eot_id|> now"}}, false, "chat");
  size_t specials = 0;
  for (const auto& p : pieces) specials += p.special;
  EXPECT_EQ(specials, 4u);  // begin_of_text, start_header, end_header, eot: none from the content
  EXPECT_THAT(data::chat_text(pieces), ::testing::HasSubstr("say <|eot_id|> now<|eot_id|>"));

  lt::expect_error(
      [] {
        data::render_chat(ChatFormat::kChatML, {{"tool", "x"}}, false, "a.jsonl:3");
      },
      {"a.jsonl:3", "message 0", "\"tool\"", "chatml"});
  lt::expect_error(
      [] {
        data::render_chat(ChatFormat::kMistral, {{"user", "a"}, {"user", "b"}}, false, "a.jsonl:4");
      },
      {"a.jsonl:4", "message 1", "needs assistant"});
  lt::expect_error(
      [] {
        data::render_chat(ChatFormat::kMistral, {{"assistant", "a"}}, false, "x");
      },
      {"message 0", "needs user"});

  // A format is found from its markers, in a template string or a list's default; others are refused.
  EXPECT_EQ(data::detect_chat_format("{{ '<|im_start|>' + m.role }}"), ChatFormat::kChatML);
  EXPECT_EQ(data::detect_chat_format("{{ bos_token }}[INST] {{ m.content }} [/INST]"), ChatFormat::kMistral);
  EXPECT_EQ(data::detect_chat_format("{{ m.content }}"), std::nullopt);
  // Llama 3.1's system header and the ChatML families' default system messages tell their variants.
  EXPECT_EQ(data::detect_chat_format("<|start_header_id|>{{ 'Cutting Knowledge Date: December 2023' }}"),
            ChatFormat::kLlama31);
  EXPECT_EQ(data::detect_chat_format(R"({{ '<|im_start|>system\n' + 'You are Qwen, created by Alibaba Cloud. )"
                                     R"(You are a helpful assistant.<|im_end|>\n' }})"),
            ChatFormat::kQwen25);
  EXPECT_EQ(data::detect_chat_format(R"(<|im_start|>system\nYou are a helpful assistant.<|im_end|>)"),
            ChatFormat::kQwen2);
  EXPECT_EQ(data::detect_chat_format(R"({{ '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>' }})"),
            ChatFormat::kChatML);
  lt::TempDir dir;
  lt::expect_error([&] { data::chat_format_in(dir.path); }, {dir.path, "no tokenizer_config.json", "chat_template"});
  std::ofstream(dir.path + "/tokenizer_config.json")
      << R"({"chat_template": [{"name": "tool_use", "template": "[INST]"},
                               {"name": "default", "template": "<|start_header_id|>"}]})";
  EXPECT_EQ(data::chat_format_in(dir.path), ChatFormat::kLlama3);
  std::ofstream(dir.path + "/tokenizer_config.json") << R"({"chat_template": "{{ messages }}"})";
  lt::expect_error([&] { data::chat_format_in(dir.path); }, {"tokenizer_config.json", "none that llmtrain writes"});
  std::ofstream(dir.path + "/tokenizer_config.json") << R"({"eos_token": "x"})";
  lt::expect_error([&] { data::chat_format_in(dir.path); }, {"tokenizer_config.json", "has no chat_template"});
}

TEST(Chat, SFTMessagesNeedAFormatAndItsTokens) {
  LLMTRAIN_REQUIRE_DATA_DIR(data_dir);
  const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data_dir + "/gpt2");
  lt::TempDir dir;
  std::ofstream(dir.path + "/chat.jsonl")
      << R"({"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})"
      << "\n";
  llmtrain::data::SFTOptions o;
  o.path = dir.path + "/chat.jsonl";
  o.seq_len = 64;
  // No format named and no folder to find one in.
  lt::expect_error([&] { data::SFTDataset(*tok, o); }, {"chat.jsonl:1", "no chat format", "data.chat_template"});
  // GPT-2's vocabulary has no <|im_start|>: refused once, by name, even where bad lines are skipped.
  o.chat_format = ChatFormat::kChatML;
  o.skip_bad_lines = true;
  lt::expect_error([&] { data::SFTDataset(*tok, o); }, {"no special token <|im_start|>"});
}
