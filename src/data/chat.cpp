#include "llmtrain/data/chat.h"

#include "../core/json.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"

namespace llmtrain::data {
namespace {

using json::Json;

// Jinja's trim: without leading and trailing whitespace.
std::string trimmed(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t first = s.find_first_not_of(ws);
  return first == std::string::npos ? "" : s.substr(first, s.find_last_not_of(ws) - first + 1);
}

class Pieces {
 public:
  void special(const char* token, bool trained = false) { out_.push_back({token, true, trained}); }
  void text(std::string t, bool trained = false) {
    if (t.empty()) return;
    if (!out_.empty() && !out_.back().special && out_.back().trained == trained) out_.back().text += t;
    else out_.push_back({std::move(t), false, trained});
  }
  std::vector<ChatPiece> take() { return std::move(out_); }

 private:
  std::vector<ChatPiece> out_;
};

void check_role(const ChatMessage& m, size_t i, const char* format, const std::string& where) {
  LLMTRAIN_CHECK(m.role == "system" || m.role == "user" || m.role == "assistant", where, ": message ", i,
                 " has role \"", m.role, "\"; chat format ", format, " takes system, user and assistant");
}

}  // namespace

std::vector<ChatPiece> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt, const std::string& where) {
  Pieces p;
  switch (format) {
    case ChatFormat::kLlama3:
    case ChatFormat::kLlama31: {
      p.special("<|begin_of_text|>");
      size_t first = 0;
      if (format == ChatFormat::kLlama31) {  // the system turn, always; the system message's content in it
        p.special("<|start_header_id|>");
        p.text("system");
        p.special("<|end_header_id|>");
        p.text("\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
        if (!messages.empty() && messages[0].role == "system") {
          p.text(trimmed(messages[0].content));
          first = 1;
        }
        p.special(chat_turn_end(format));
      }
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        check_role(m, i, "llama3", where);
        const bool a = m.role == "assistant";
        p.special("<|start_header_id|>");
        p.text(m.role);
        p.special("<|end_header_id|>");
        p.text("\n\n");
        p.text(trimmed(m.content), a);
        p.special(chat_turn_end(format), a);
      }
      if (add_generation_prompt) {
        p.special("<|start_header_id|>");
        p.text("assistant");
        p.special("<|end_header_id|>");
        p.text("\n\n");
      }
      break;
    }
    case ChatFormat::kChatML:
    case ChatFormat::kQwen2:
    case ChatFormat::kQwen25:
    case ChatFormat::kSmolLM2:
      if (*chat_default_system(format) != '\0' && !messages.empty() && messages[0].role != "system") {
        p.special("<|im_start|>");
        p.text(std::string("system\n") + chat_default_system(format));
        p.special(chat_turn_end(format));
        p.text("\n");
      }
      for (size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        check_role(m, i, "chatml", where);
        const bool a = m.role == "assistant";
        p.special("<|im_start|>");
        p.text(m.role + "\n");
        p.text(m.content, a);
        p.special(chat_turn_end(format), a);
        p.text("\n");
      }
      if (add_generation_prompt) {
        p.special("<|im_start|>");
        p.text("assistant\n");
      }
      break;
    case ChatFormat::kMistral: {
      p.special("<s>");
      size_t first = 0;
      std::string system;
      if (!messages.empty() && messages[0].role == "system") {
        system = messages[0].content + "\n\n";
        first = 1;
      }
      for (size_t i = first; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        check_role(m, i, "mistral", where);
        const char* want = (i - first) % 2 == 0 ? "user" : "assistant";
        LLMTRAIN_CHECK(m.role == want, where, ": message ", i, " has role \"", m.role, "\" where chat format mistral ",
                       "needs ", want, " (an optional system message, then user and assistant in turn)");
        if (m.role == "user") {
          p.text("[INST] " + (i == first ? system : std::string()) + m.content + " [/INST]");
        } else {
          p.text(m.content, true);
          p.special(chat_turn_end(format), true);
        }
      }
      break;  // the next [INST] block is the generation prompt's place: nothing to add
    }
    case ChatFormat::kAuto: LLMTRAIN_CHECK(false, where, ": render_chat needs a chat format, not auto");
  }
  return p.take();
}

const char* chat_turn_end(ChatFormat format) {
  switch (format) {
    case ChatFormat::kLlama3:
    case ChatFormat::kLlama31: return "<|eot_id|>";
    case ChatFormat::kChatML:
    case ChatFormat::kQwen2:
    case ChatFormat::kQwen25:
    case ChatFormat::kSmolLM2: return "<|im_end|>";
    case ChatFormat::kMistral: return "</s>";
    case ChatFormat::kAuto: break;
  }
  LLMTRAIN_CHECK(false, "chat_turn_end needs a chat format, not auto");
  return "";
}

const char* chat_default_system(ChatFormat format) {
  switch (format) {
    case ChatFormat::kQwen2: return "You are a helpful assistant.";
    case ChatFormat::kQwen25: return "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.";
    case ChatFormat::kSmolLM2: return "You are a helpful AI assistant named SmolLM, trained by Hugging Face";
    default: return "";
  }
}

std::string chat_text(const std::vector<ChatPiece>& pieces) {
  std::string out;
  for (const auto& piece : pieces) out += piece.text;
  return out;
}

void encode_chat(const tokenizer::Tokenizer& tok, const std::vector<ChatPiece>& pieces, std::vector<int32_t>& ids,
                 std::vector<bool>& trained) {
  for (const auto& piece : pieces) {
    const auto part = tok.encode(piece.text, /*allow_special=*/piece.special);
    LLMTRAIN_CHECK(!piece.special || (part.size() == 1 && tok.encode(piece.text) != part), "the tokenizer has no ",
                   "special token ", piece.text, ", which its chat format needs (choose the format of its model ",
                   "family: data.chat_template)");
    ids.insert(ids.end(), part.begin(), part.end());
    trained.insert(trained.end(), part.size(), piece.trained);
  }
}

std::optional<ChatFormat> detect_chat_format(std::string_view jinja) {
  const auto has = [&](std::string_view text) { return jinja.find(text) != std::string_view::npos; };
  if (has("<|start_header_id|>")) return has("Cutting Knowledge Date") ? ChatFormat::kLlama31 : ChatFormat::kLlama3;
  if (has("<|im_start|>")) {
    // The default text right before the turn's end; Qwen2.5's first, since Qwen2's ends it.
    for (const ChatFormat f : {ChatFormat::kQwen25, ChatFormat::kSmolLM2, ChatFormat::kQwen2})
      if (has(std::string(chat_default_system(f)) + "<|im_end|>")) return f;
    return ChatFormat::kChatML;
  }
  if (jinja.find("[INST]") != std::string_view::npos) return ChatFormat::kMistral;
  return std::nullopt;
}

ChatFormat chat_format_in(const std::string& dir) {
  const std::string path = dir + "/tokenizer_config.json";
  LLMTRAIN_CHECK(fs::exists(path), "chat format: ", dir, " holds no tokenizer_config.json to take chat_template ",
                 "from; name the format (data.chat_template: ", Choice<ChatFormat>::names(ChatFormat::kAuto), ")");
  const Json config = json::parse_file(path, uint64_t(64) << 20);
  const Json* t = config.is_object() && config.contains("chat_template") ? &config["chat_template"] : nullptr;
  if (t && t->is_array())  // named templates: the default one
    for (const Json& named : *t)
      if (named.is_object() && named.value("name", "") == "default" && named.contains("template"))
        t = &named["template"];
  LLMTRAIN_CHECK(t && t->is_string(), "chat format: ", path, " has no chat_template (a string, or a list with one ",
                 "named default); name the format (data.chat_template: ", Choice<ChatFormat>::names(ChatFormat::kAuto),
                 ")");
  const auto format = detect_chat_format(t->get<std::string>());
  LLMTRAIN_CHECK(format.has_value(), "chat format: the chat_template of ", path, " is none that llmtrain writes (",
                 "Llama 3's <|start_header_id|>, ChatML's <|im_start|>, Mistral's [INST]): ",
                 json::excerpt(t->get<std::string>()));
  return *format;
}

}  // namespace llmtrain::data
