// Chat conversations laid out in each format (data/chat.h): the first byte picks the format and
// whether the generation prompt follows, the rest is the messages as JSON. A conversation is laid out
// or refused with llmtrain::Error; laid out, it starts with the format's bos, holds one trained end
// token per assistant message, and never two text pieces in a row of one kind (they are one string).
#include <string>

#include "../../src/core/json.h"
#include "fuzz_util.h"
#include "llmtrain/data/chat.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using llmtrain::data::ChatFormat;
  if (size == 0) return 0;
  const ChatFormat formats[] = {ChatFormat::kLlama3, ChatFormat::kLlama31, ChatFormat::kChatML, ChatFormat::kQwen2,
                                ChatFormat::kQwen25, ChatFormat::kSmolLM2, ChatFormat::kMistral};
  const ChatFormat format = formats[(data[0] & 0x7f) % 7];
  const bool prompt = data[0] & 0x80;
  try {
    const auto j = llmtrain::json::parse(std::string(reinterpret_cast<const char*>(data + 1), size - 1), "messages");
    if (!j.is_array()) return 0;
    std::vector<llmtrain::data::ChatMessage> messages;
    size_t assistants = 0;
    for (const auto& m : j) {
      if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("content") ||
          !m["content"].is_string())
        return 0;
      messages.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
      assistants += messages.back().role == "assistant";
    }
    const auto pieces = llmtrain::data::render_chat(format, messages, prompt, "fuzz");
    const std::string text = llmtrain::data::chat_text(pieces);
    if (format == ChatFormat::kLlama3 || format == ChatFormat::kLlama31)
      fuzz::require(text.rfind("<|begin_of_text|>", 0) == 0);
    if (format == ChatFormat::kMistral) fuzz::require(text.rfind("<s>", 0) == 0);
    size_t trained_ends = 0;
    for (size_t i = 0; i < pieces.size(); ++i) {
      trained_ends += pieces[i].special && pieces[i].trained;
      if (i > 0 && !pieces[i].special && !pieces[i - 1].special)
        fuzz::require(pieces[i].trained != pieces[i - 1].trained);
    }
    fuzz::require(trained_ends == assistants);
  } catch (const llmtrain::Error&) {
  }
  return 0;
}
