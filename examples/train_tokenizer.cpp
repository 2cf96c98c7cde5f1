// train_tokenizer: trains a SentencePiece BPE or unigram model on text files, then reports how it
// tokenizes them.
//   build/bin/train_tokenizer --model-type bpe --vocab-size 8000 --out tok/sp corpus/*.txt
#include <llmtrain/text.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <iterator>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"Train a SentencePiece tokenizer (BPE or unigram) on text files"};
  llmtrain_cli::setup(app, "train_tokenizer --vocab-size 4096 --out tok/sp corpus.txt");
  llmtrain::tokenizer::SentencePieceTrainOptions o;
  app.add_option("inputs", o.inputs, "text files")->required()->check(CLI::ExistingFile);
  app.add_option("--out", o.model_prefix, "writes OUT.model and OUT.vocab")->required();
  app.add_option("--model-type", o.model_type, "bpe or unigram")
      ->capture_default_str()
      ->check(CLI::IsMember({"bpe", "unigram"}));
  app.add_option("--vocab-size", o.vocab_size, "pieces, byte pieces and specials included")->capture_default_str();
  app.add_option("--character-coverage", o.character_coverage, "share of characters kept as pieces")
      ->capture_default_str();
  app.add_option("--max-sentences", o.max_sentences, "train on a random sample of this many lines (0: all)")
      ->capture_default_str();
  app.add_option("--max-line-bytes", o.max_line_bytes, "skip longer lines")->capture_default_str();
  app.add_flag("--force", o.force, "replace existing OUT.model and OUT.vocab files");
  bool no_byte_fallback = false;
  app.add_flag("--no-byte-fallback", no_byte_fallback, "map unknown characters to <unk> instead of bytes");
  bool fold_whitespace = false;
  app.add_flag("--fold-whitespace", fold_whitespace,
               "normalise as SentencePiece does by default (NFKC; newlines and runs of spaces become one space) "
               "instead of keeping the text as it is");
  CLI11_PARSE(app, argc, argv);
  o.byte_fallback = !no_byte_fallback;
  o.keep_whitespace = !fold_whitespace;
  try {
    const auto start = std::chrono::steady_clock::now();
    llmtrain::tokenizer::train_sentencepiece(o);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const llmtrain::tokenizer::SentencePiece tok(o.model_prefix + ".model");
    size_t bytes = 0, tokens = 0;
    for (const auto& in : o.inputs) {
      std::ifstream f(in, std::ios::binary);
      const std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
      bytes += text.size();
      tokens += tok.encode(text).size();
    }
    std::printf("trained %s.model (%s, %lld pieces) in %.1f s; inputs: %zu bytes -> %zu tokens (%.2f bytes/token)\n",
                o.model_prefix.c_str(), o.model_type.c_str(), static_cast<long long>(tok.vocab_size()), s, bytes,
                tokens, tokens ? double(bytes) / tokens : 0.0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_tokenizer: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
  return 0;
}
