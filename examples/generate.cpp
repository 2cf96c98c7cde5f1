// generate: continues a prompt with a trained checkpoint or a Hugging Face folder (GPT-2, Llama, Mistral, Qwen2),
// printing tokens as they come (KV cache; on a GPU in bfloat16 with the decode step as a CUDA graph).
//   build/bin/generate --checkpoint runs/sotu_gpt2_124m --prompt "My fellow Americans" --max-new-tokens 64
//   --temperature 0.8 --top-k 50
// The tokenizer is the model's own (a run folder's copy; a Hugging Face folder's files) unless named.
// Llama-family models get their tokenizer's bos first. --chat makes the prompt a user turn in the
// model's chat format (its folder's chat template, or --chat-template) and prints the answer alone:
//   build/bin/generate --checkpoint Llama-3.2-1B-Instruct --chat --prompt "Name three rivers." --temperature 0
// --adapter DIR merges a PEFT LoRA adapter folder into the model's weights before generating.
#include <llmtrain/llmtrain.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <climits>
#include <cstdio>

#include "cli.h"
#include "loaded_model.h"

int main(int argc, char** argv) {
  CLI::App app{"Generate text from a checkpoint or Hugging Face folder of any family"};
  llmtrain_cli::setup(app,
                      "generate --checkpoint runs/demo/model --prompt \"The meaning of life\" --max-new-tokens 60");
  std::string checkpoint, prompt, prompt_ids, stop_ids, vocab_dir, tokenizer, model_file,
      format = "text", device = "auto", dtype = "auto", chat_template = "auto", system;
  int64_t max_new = 64;
  llmtrain::infer::SamplingOptions o;
  app.add_option("--checkpoint", checkpoint,
                 "checkpoint folder, a run's out_dir (newest checkpoint), a Hugging Face folder or an llm.c .bin")
      ->required();
  auto* text_opt = app.add_option("--prompt", prompt, "prompt text");
  app.add_option("--prompt-ids", prompt_ids, "prompt as a JSON array of ids, e.g. \"[464, 1578]\"")->excludes(text_opt);
  app.add_option("--max-new-tokens", max_new, "tokens to generate")->capture_default_str();
  app.add_option("--temperature", o.temperature, "0: greedy")->capture_default_str();
  app.add_option("--top-k", o.top_k, "keep the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", o.top_p, "keep the most likely tokens up to this probability mass")->capture_default_str();
  app.add_option("--seed", o.seed, "sampling seed")->capture_default_str();
  app.add_option("--stop-ids", stop_ids,
                 "ids that end generation, a JSON array (default: the tokenizer's end-of-text)");
  app.add_option("--tokenizer", tokenizer, "gpt2 or sentencepiece (default: the model's own, else gpt2)")
      ->check(CLI::IsMember({"gpt2", "sentencepiece"}));
  app.add_option("--vocab-dir", vocab_dir, "GPT-2 files (default: $LLMTRAIN_GPT2_DIR, else $LLMTRAIN_DATA_DIR/gpt2)");
  app.add_option("--model", model_file, "SentencePiece .model file");
  app.add_option("--format", format, "text or ids")->capture_default_str()->check(CLI::IsMember({"text", "ids"}));
  llmtrain_cli::add_device_options(app, device, dtype);
  bool chat = false;
  app.add_flag("--chat", chat, "the prompt is a user's message: laid out in the chat format, the answer printed");
  app.add_option("--system", system, "with --chat: a system message before the user's");
  app.add_option("--chat-template", chat_template, "with --chat: auto (the model folder's), llama3, chatml or mistral")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "llama3", "chatml", "mistral"}));
  std::string adapter;
  app.add_option("--adapter", adapter, "a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors)");
  bool eager = false;
  app.add_flag("--eager", eager, "on cuda, run the decode step op by op instead of as a CUDA graph");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto model = llmtrain_cli::load_model_on(checkpoint, adapter, device, dtype);
    std::unique_ptr<llmtrain::tokenizer::Tokenizer> tok;
    std::string tok_dir;
    // A tokenizer is needed for text out or in, for the id that starts a document, and for the default
    // stop id (the end of text): only ids in and out with --stop-ids do without one.
    if (format == "text" || !prompt.empty() || prompt_ids.empty() || stop_ids.empty() || chat) {
      auto t = llmtrain_cli::model_tokenizer(checkpoint, tokenizer, vocab_dir, model_file);
      tok = std::move(t.tok);
      tok_dir = std::move(t.dir);
    }
    const auto bos = tok ? llmtrain::train::input_bos(model->spec(), *tok) : std::nullopt;
    std::vector<int32_t> ids;
    std::vector<int32_t> stops;  // the chat format's end of a turn
    if (chat) {
      LLMTRAIN_CHECK(!prompt.empty(), "--chat needs --prompt (the user's message)");
      using llmtrain::data::ChatFormat;
      const ChatFormat f = chat_template == "auto"
                               ? llmtrain::data::chat_format_in(tok_dir)
                               : llmtrain::Choice<ChatFormat>::parse(chat_template, "--chat-template").value();
      std::vector<llmtrain::data::ChatMessage> messages;
      if (!system.empty()) messages.push_back({"system", system});
      messages.push_back({"user", prompt});
      std::vector<bool> trained;
      llmtrain::data::encode_chat(*tok, llmtrain::data::render_chat(f, messages, true, "--prompt"), ids, trained);
      // The token that ends an assistant turn, where the tokenizer has it as one.
      stops = tok->encode(llmtrain::data::chat_turn_end(f), /*allow_special=*/true);
      if (stops.size() != 1) stops.clear();
    } else if (!prompt_ids.empty()) {
      ids = llmtrain::tokenizer::parse_ids(prompt_ids, "--prompt-ids", model->vocab_size());
    } else if (!prompt.empty()) {
      ids = tok->encode(prompt);
      if (bos) ids.insert(ids.begin(), *bos);
    } else {
      LLMTRAIN_CHECK(tok && (bos || tok->eot_id()), "no prompt: give --prompt or --prompt-ids");
      ids = {bos ? *bos : *tok->eot_id()};  // start a fresh document
    }
    if (!stop_ids.empty()) o.stop_tokens = llmtrain::tokenizer::parse_ids(stop_ids, "--stop-ids", model->vocab_size());
    else if (tok && tok->eot_id()) o.stop_tokens = {*tok->eot_id()};
    if (stop_ids.empty()) o.stop_tokens.insert(o.stop_tokens.end(), stops.begin(), stops.end());
    if (tok) o.vocab_limit = tok->vocab_size();  // no padding id, which no text stands for
    const auto is_stop = [&](int32_t id) {
      return std::find(o.stop_tokens.begin(), o.stop_tokens.end(), id) != o.stop_tokens.end();
    };
    // Text is printed as the growing difference of decode(prompt + new ids): decoding one id at a time
    // would lose what depends on its neighbours (SentencePiece drops a leading space at each call).
    // (A chat shows its answer alone; a bos or end-of-text that starts a document shows nothing.)
    std::vector<int32_t> shown = chat || (prompt.empty() && prompt_ids.empty()) ? std::vector<int32_t>{} : ids;
    if (!chat && bos && !shown.empty() && shown[0] == *bos) shown.erase(shown.begin());
    size_t printed = 0;
    // A character split over tokens waits for its last byte; bytes that are no UTF-8 print as U+FFFD.
    const auto print_new = [&](bool last) {
      const std::string text = tok->decode(shown);
      const size_t ready = last ? text.size() : llmtrain::tokenizer::complete_utf8_prefix(text);
      if (ready > printed)
        std::fputs(llmtrain::tokenizer::printable_utf8(text.substr(printed, ready - printed)).c_str(), stdout);
      std::fflush(stdout);
      printed = std::max(printed, ready);
    };
    if (format == "text") print_new(false);
    std::vector<int32_t> produced;
    llmtrain::infer::GeneratorOptions run;
    run.cuda_graph = !eager;
    llmtrain::infer::Generator generator(model, run);
    generator.generate({ids}, max_new, o, [&](int64_t, int32_t id) {
      produced.push_back(id);
      if (format == "text" && !is_stop(id)) {
        shown.push_back(id);
        print_new(false);
      }
    });
    if (format == "text") print_new(true);
    if (format == "ids") std::printf("%s", nlohmann::json(produced).dump().c_str());
    std::printf("\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
  return 0;
}
