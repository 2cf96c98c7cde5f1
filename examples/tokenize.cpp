// tokenize: UTF-8 text on stdin -> a JSON array of token ids on stdout, or back with --decode.
//   echo "Hello world" | build/bin/tokenize --vocab-dir ../shared/data/gpt2        # [15496, 995, 198]
//   echo "[15496, 995]" | build/bin/tokenize --vocab-dir ../shared/data/gpt2 --decode
#include <llmtrain/text.h>
#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdio>
#include <string>
#include <vector>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"Text on stdin to GPT-2 (or SentencePiece) token ids on stdout, or back"};
  llmtrain_cli::setup(app, "echo \"Hello world\" | tokenize --vocab-dir ../shared/data/gpt2");
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
    // stdin may be a pipe that never ends: read it in pieces, up to a bound.
    constexpr size_t kMaxInput = size_t(1) << 30;
    std::string input;
    char buf[1 << 16];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, stdin)) > 0;) {
      LLMTRAIN_CHECK(input.size() + n <= kMaxInput, "stdin holds more than ", kMaxInput,
                     " bytes: give the text in smaller pieces (or use prepare_data for a corpus)");
      input.append(buf, n);
    }
    LLMTRAIN_CHECK(!std::ferror(stdin), "cannot read stdin");
    if (decode) {
      const std::vector<int32_t> v = llmtrain::tokenizer::parse_ids(input, "--decode: stdin", tok->vocab_size());
      const std::string text = llmtrain::tokenizer::printable_utf8(tok->decode(v));
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      const std::vector<int32_t> ids = tok->encode(input, allow_special);
      // Written with to_chars into one buffer: on a large corpus, formatting is a fair part of the run.
      std::string line(ids.size() * 12 + 3, '\0');
      char* p = line.data();
      *p++ = '[';
      for (size_t i = 0; i < ids.size(); ++i) {
        if (i) *p++ = ',';
        p = std::to_chars(p, line.data() + line.size(), ids[i]).ptr;
      }
      *p++ = ']';
      *p++ = '\n';
      std::fwrite(line.data(), 1, size_t(p - line.data()), stdout);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenize: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
  return 0;
}
