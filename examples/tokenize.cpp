// tokenize: UTF-8 text on stdin -> a JSON array of token ids on stdout, or back with --decode.
//   echo "Hello world" | build/bin/tokenize --vocab-dir ../shared/data/gpt2        # [15496, 995, 198]
//   echo "[15496, 995]" | build/bin/tokenize --vocab-dir ../shared/data/gpt2 --decode
#include <CLI/CLI.hpp>
#include <llmtrain/llmtrain.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>

int main(int argc, char** argv) {
  CLI::App app{"Text on stdin to GPT-2 (or SentencePiece) token ids on stdout, or back"};
  std::string kind = "gpt2", vocab_dir, model;
  bool decode = false, allow_special = false;
  app.add_option("--tokenizer", kind, "gpt2 or sentencepiece")->capture_default_str();
  app.add_option("--vocab-dir", vocab_dir, "GPT-2 files (default: $LLMTRAIN_GPT2_DIR, else $LLMTRAIN_DATA_DIR/gpt2)");
  app.add_option("--model", model, "SentencePiece .model file (with --tokenizer sentencepiece)");
  app.add_flag("--decode", decode, "read a JSON array of ids, write the text");
  app.add_flag("--allow-special", allow_special, "encode <|endoftext|> (or </s>) as its id");
  CLI11_PARSE(app, argc, argv);
  try {
    const auto tok = llmtrain::tokenizer::load_tokenizer(kind, kind == "gpt2" ? vocab_dir : model);
    const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (decode) {
      nlohmann::json ids;
      try {
        ids = nlohmann::json::parse(input);
      } catch (const nlohmann::json::exception&) {
        LLMTRAIN_CHECK(false, "--decode: stdin is not a JSON array of ids");
      }
      LLMTRAIN_CHECK(ids.is_array(), "--decode: stdin is not a JSON array of ids");
      std::vector<int32_t> v;
      for (const auto& id : ids) {
        LLMTRAIN_CHECK(id.is_number_integer(), "--decode: ", id.dump(), " is not an integer id");
        v.push_back(id.get<int32_t>());
      }
      const std::string text = tok->decode(v);
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      std::printf("%s\n", nlohmann::json(tok->encode(input, allow_special)).dump().c_str());
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize: %s\n", e.what());
    return 1;
  }
  return 0;
}
