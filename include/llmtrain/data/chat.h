// Chat conversations ({"messages": [{"role": ..., "content": ...}, ...]}) laid out in the chat format an
// instruct model family was trained on, as Hugging Face chat templates render them: Llama 3's headers,
// ChatML's <|im_start|> turns (Qwen2, SmolLM2) and Mistral's [INST] blocks. A conversation becomes
// pieces, each a special token or plain text, each inside an assistant turn (trained: the loss covers
// its tokens) or not; encode_chat turns them into ids. Plain text between two special tokens is encoded
// as one string where the whole of it is trained or untrained, so ids are those of the whole rendered
// text except where an assistant's content meets the untrained header before it. A message's content
// is always plain text: "<|eot_id|>" typed by a user stays text, never the control token.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "llmtrain/core/choice.h"
#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::data {

/// A chat format, or auto: the one the tokenizer's folder names (tokenizer_config.json's chat_template).
/// llama3.1 is Llama 3's with the system header Llama 3.1, 3.2 and 3.3 always write; qwen2, qwen2.5 and
/// smollm2 are ChatML with the system message those families' templates add when a conversation has none.
enum class ChatFormat { kAuto, kLlama3, kLlama31, kChatML, kQwen2, kQwen25, kSmolLM2, kMistral };

inline const ChoiceNames<ChatFormat>& choice_names(ChatFormat) {
  static const ChoiceNames<ChatFormat> names{{ChatFormat::kAuto, "auto"},        {ChatFormat::kLlama3, "llama3"},
                                             {ChatFormat::kLlama31, "llama3.1"}, {ChatFormat::kChatML, "chatml"},
                                             {ChatFormat::kQwen2, "qwen2"},      {ChatFormat::kQwen25, "qwen2.5"},
                                             {ChatFormat::kSmolLM2, "smollm2"},  {ChatFormat::kMistral, "mistral"}};
  return names;
}

struct ChatMessage {
  std::string role;  // system, user or assistant
  std::string content;
};

/// A run of a rendered conversation: one special token (by its text) or plain text.
struct ChatPiece {
  std::string text;
  bool special = false;  // a special token of the tokenizer ("<|eot_id|>", "<s>")
  bool trained = false;  // inside an assistant turn: its content and the token that ends it
};

/// `messages` in `format` (not auto):
///   llama3:  <|begin_of_text|> then each <|start_header_id|>ROLE<|end_header_id|>\n\nCONTENT<|eot_id|>
///            (the content stripped of leading and trailing whitespace);
///   llama3.1: llama3 whose first turn is always the system one, "Cutting Knowledge Date: December
///            2023\nToday Date: 26 Jul 2024\n\n" before the system message's content (if any). The date
///            is the one Llama 3.1's template writes; 3.2's writes the day it runs unless given
///            date_string, which llmtrain does not follow, so that a run's data is the same any day;
///   chatml:  each <|im_start|>ROLE\nCONTENT<|im_end|>\n; qwen2, qwen2.5 and smollm2 first add a system turn
///            with their template's default text (chat_default_system) where the first message is not
///            a system one;
///   mistral: <s> then [INST] USER [/INST]ASSISTANT</s> for each exchange, a system message (first, at
///            most one) put before the first user message's content with a blank line.
/// With `add_generation_prompt`, the header of the assistant turn that follows. Throws llmtrain::Error
/// naming `where` and the message for a role the format does not have (mistral: also for turns that
/// do not alternate user, assistant, starting with a user).
///   auto pieces = render_chat(ChatFormat::kChatML, {{"user", "Hi"}, {"assistant", "Hello!"}}, false, "chat");
std::vector<ChatPiece> render_chat(ChatFormat format, const std::vector<ChatMessage>& messages,
                                   bool add_generation_prompt, const std::string& where);

/// The special token that ends an assistant turn in `format` (not auto): "<|eot_id|>", "<|im_end|>", "</s>".
const char* chat_turn_end(ChatFormat format);
/// The system message `format` adds to a conversation without one: Qwen2's "You are a helpful
/// assistant.", Qwen2.5's "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
/// SmolLM2's "You are a helpful AI assistant named SmolLM, trained by Hugging Face"; empty for the others.
const char* chat_default_system(ChatFormat format);

/// The pieces' texts, one after another: what transformers' apply_chat_template(tokenize=False) renders.
std::string chat_text(const std::vector<ChatPiece>& pieces);

/// The ids of `pieces` and, for each, whether it is trained. Throws llmtrain::Error naming the format
/// and the token when the tokenizer lacks a special token the pieces use.
void encode_chat(const tokenizer::Tokenizer& tok, const std::vector<ChatPiece>& pieces, std::vector<int32_t>& ids,
                 std::vector<bool>& trained);

/// The format a Hugging Face chat template (Jinja text) writes: the one whose markers it uses (and, for
/// Llama 3 and ChatML, whose knowledge-date header or default system text it holds), or nullopt.
std::optional<ChatFormat> detect_chat_format(std::string_view jinja);

/// The format named by the chat_template of the tokenizer_config.json in `dir`. Throws llmtrain::Error
/// naming the file when there is none or its template is none of the formats.
ChatFormat chat_format_in(const std::string& dir);

}  // namespace llmtrain::data
