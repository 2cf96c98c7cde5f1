// generate_gpt2: continues a prompt with a trained checkpoint, printing tokens as they come.
//   build/bin/generate_gpt2 --checkpoint runs/sotu_gpt2_124m --vocab-dir ../shared/data/gpt2 \
//       --prompt "My fellow Americans" --max-new-tokens 64 --temperature 0.8 --top-k 50
#include <CLI/CLI.hpp>
#include <llmtrain/llmtrain.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"Generate text from a GPT-2 checkpoint"};
  std::string checkpoint, prompt, prompt_ids, vocab_dir, tokenizer = "gpt2", model_file, format = "text", device = "auto";
  int64_t max_new = 64;
  llmtrain::infer::SamplingOptions o;
  app.add_option("--checkpoint", checkpoint, "checkpoint folder, or a run's out_dir (newest checkpoint)")->required();
  auto* text_opt = app.add_option("--prompt", prompt, "prompt text");
  app.add_option("--prompt-ids", prompt_ids, "prompt as a JSON array of ids, e.g. \"[464, 1578]\"")->excludes(text_opt);
  app.add_option("--max-new-tokens", max_new, "tokens to generate")->capture_default_str();
  app.add_option("--temperature", o.temperature, "0: greedy")->capture_default_str();
  app.add_option("--top-k", o.top_k, "keep the k most likely tokens (0: all)")->capture_default_str();
  app.add_option("--top-p", o.top_p, "keep the most likely tokens up to this probability mass")->capture_default_str();
  app.add_option("--seed", o.seed, "sampling seed")->capture_default_str();
  app.add_option("--tokenizer", tokenizer, "gpt2 or sentencepiece")->capture_default_str();
  app.add_option("--vocab-dir", vocab_dir, "GPT-2 files (default: $LLMTRAIN_GPT2_DIR, else $LLMTRAIN_DATA_DIR/gpt2)");
  app.add_option("--model", model_file, "SentencePiece .model file");
  app.add_option("--format", format, "text or ids")->capture_default_str()->check(CLI::IsMember({"text", "ids"}));
  app.add_option("--device", device, "auto, cpu or cuda")->capture_default_str()->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  CLI11_PARSE(app, argc, argv);
  try {
    auto model = llmtrain::train::load_checkpoint_model(checkpoint);
    const bool cuda = device == "cuda" || (device == "auto" && torch::cuda::is_available());
    LLMTRAIN_CHECK(!cuda || torch::cuda::is_available(), "--device cuda, but no CUDA device is visible");
    model->to(cuda ? torch::kCUDA : torch::kCPU);
    std::unique_ptr<llmtrain::tokenizer::Tokenizer> tok;
    if (format == "text" || !prompt.empty())
      tok = llmtrain::tokenizer::load_tokenizer(tokenizer, tokenizer == "gpt2" ? vocab_dir : model_file);
    std::vector<int32_t> ids;
    if (!prompt_ids.empty()) {
      const auto j = nlohmann::json::parse(prompt_ids, nullptr, false);
      LLMTRAIN_CHECK(j.is_array(), "--prompt-ids: expected a JSON array of ids, got ", prompt_ids);
      for (const auto& id : j) {
        LLMTRAIN_CHECK(id.is_number_integer(), "--prompt-ids: ", id.dump(), " is not an integer id");
        ids.push_back(id.get<int32_t>());
      }
    } else if (!prompt.empty()) {
      ids = tok->encode(prompt);
    } else {
      LLMTRAIN_CHECK(tok && tok->eot_id(), "no prompt: give --prompt or --prompt-ids");
      ids = {*tok->eot_id()};  // start a fresh document
    }
    o.stop_token = tok ? tok->eot_id() : std::nullopt;
    // Text is printed as the growing difference of decode(prompt + new ids): decoding one id at a time
    // would lose what depends on its neighbours (SentencePiece drops a leading space at each call).
    std::vector<int32_t> shown = prompt.empty() && prompt_ids.empty() ? std::vector<int32_t>{} : ids;
    size_t printed = 0;
    const auto print_new = [&] {
      const std::string text = tok->decode(shown);
      if (text.size() > printed) std::fwrite(text.data() + printed, 1, text.size() - printed, stdout);
      std::fflush(stdout);
      printed = text.size();
    };
    if (format == "text") print_new();
    std::vector<int32_t> produced;
    llmtrain::infer::generate(model, ids, max_new, o, [&](int32_t id) {
      produced.push_back(id);
      if (format == "text" && id != o.stop_token) {
        shown.push_back(id);
        print_new();
      }
    });
    if (format == "ids") std::printf("%s", nlohmann::json(produced).dump().c_str());
    std::printf("\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "generate_gpt2: %s\n", e.what());
    return 1;
  }
  return 0;
}
