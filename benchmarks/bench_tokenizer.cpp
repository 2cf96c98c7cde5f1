// bench_tokenizer: GPT-2 BPE encoding speed of llmtrain against tiktoken (its Rust core, through
// Python), both single-threaded, on the same text in the same run. The text is the State of the
// Union corpus, all speeches joined in file order.
//   build/bin/bench_tokenizer --data ../shared/data [--repeat 5]
#include <CLI/CLI.hpp>
#include <dirent.h>
#include <llmtrain/llmtrain.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include "cli.h"
#include "peer.h"

namespace {

std::string corpus(const std::string& sotu_dir) {
  std::vector<std::string> names;
  DIR* d = ::opendir(sotu_dir.c_str());
  LLMTRAIN_CHECK(d != nullptr, "bench_tokenizer: cannot open ", sotu_dir);
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.size() > 4 && n.substr(n.size() - 4) == ".txt") names.push_back(n);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  std::string text;
  for (const auto& n : names) text += llmtrain::fs::read_file(sotu_dir + "/" + n);
  return text;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"GPT-2 BPE encoding speed: llmtrain against tiktoken, single-threaded"};
  llmtrain_cli::setup(app, "bench_tokenizer --data ../shared/data --repeat 3");
  const char* env = std::getenv("LLMTRAIN_DATA_DIR");
  std::string data = env ? env : "", python = LLMTRAIN_PYTHON;
  int repeat = 5;
  app.add_option("--data", data, "folder with gpt2/ and sotu/ (default: $LLMTRAIN_DATA_DIR)");
  app.add_option("--python", python, "Python with tiktoken (default: the one CMake found)")->capture_default_str();
  app.add_option("--repeat", repeat, "runs of each; the best counts")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);
  try {
    LLMTRAIN_CHECK(!data.empty(), "bench_tokenizer: pass --data or set LLMTRAIN_DATA_DIR");
    const auto tok = llmtrain::tokenizer::GPT2BPE::from_dir(data + "/gpt2");
    const std::string text = corpus(data + "/sotu");
    const double mb = text.size() / 1e6;

    std::vector<int32_t> ids;
    double ours = 1e30;
    for (int i = 0; i < repeat; ++i) {
      const auto start = std::chrono::steady_clock::now();
      ids = tok->encode(text);
      ours = std::min(ours, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
    uint64_t checksum = 0;
    for (size_t i = 0; i < ids.size(); ++i) checksum = (checksum + (i + 1) * uint64_t(ids[i])) % (1ull << 61);

    // One word without spaces is one piece to merge (a scan per merge would be quadratic in its length):
    // 64 KB and 1 MB of random letters, for both.
    std::mt19937 rng(1);
    std::string word;
    for (int i = 0; i < (1 << 20); ++i) word += char('a' + rng() % 26);
    const std::string small_word = word.substr(0, 1 << 16);
    const auto best_of = [&](const std::string& t) {
      double best = 1e30;
      for (int i = 0; i < repeat; ++i) {
        const auto start = std::chrono::steady_clock::now();
        tok->encode(t);
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      }
      return best;
    };
    const double ours_word = best_of(word), ours_small = best_of(small_word);

    const std::string tmp = llmtrain::fs::make_temp_dir("llmtrain_bench_tok_");
    std::ofstream(tmp + "/corpus.txt", std::ios::binary) << text;
    std::ofstream(tmp + "/word.txt", std::ios::binary) << small_word;
    std::ofstream(tmp + "/big_word.txt", std::ios::binary) << word;
    const std::string script = std::string(LLMTRAIN_SOURCE_DIR) + "/benchmarks/tiktoken_speed.py";
    nlohmann::json peer, peer_word, peer_big_word;
    try {
      peer = bench::run_python_json(python, script, {data + "/gpt2", tmp + "/corpus.txt", std::to_string(repeat)});
      peer_word = bench::run_python_json(python, script, {data + "/gpt2", tmp + "/word.txt", std::to_string(repeat)});
      peer_big_word = bench::run_python_json(python, script, {data + "/gpt2", tmp + "/big_word.txt", std::to_string(repeat)});
    } catch (...) {
      llmtrain::fs::remove_tree(tmp);
      throw;
    }
    llmtrain::fs::remove_tree(tmp);
    const double theirs = peer["seconds"].get<double>();
    const bool equal = peer["tokens"].get<size_t>() == ids.size() && peer["checksum"].get<uint64_t>() == checksum;

    std::printf("GPT-2 BPE, %.1f MB of text, %zu tokens, best of %d, one thread\n", mb, ids.size(), repeat);
    std::printf("%-10s %10s %10s\n", "encoder", "seconds", "MB/s");
    std::printf("%-10s %10.3f %10.2f\n", "llmtrain", ours, mb / ours);
    std::printf("%-10s %10.3f %10.2f\n", "tiktoken", theirs, mb / theirs);
    std::printf("speed-up %.2fx, ids %s\n", theirs / ours, equal ? "identical" : "DIFFERENT");
    const double theirs_small = peer_word["seconds"].get<double>(), theirs_word = peer_big_word["seconds"].get<double>();
    std::printf("one word without spaces (a single piece to merge):\n");
    std::printf("%-10s %10s %10s %10s\n", "encoder", "word", "seconds", "MB/s");
    std::printf("%-10s %10s %10.4f %10.2f\n", "llmtrain", "64 KB", ours_small, small_word.size() / 1e6 / ours_small);
    std::printf("%-10s %10s %10.4f %10.2f\n", "tiktoken", "64 KB", theirs_small, small_word.size() / 1e6 / theirs_small);
    std::printf("%-10s %10s %10.4f %10.2f  (%.2fx its speed on the corpus)\n", "llmtrain", "1 MB", ours_word,
                word.size() / 1e6 / ours_word, (word.size() / ours_word) / (text.size() / ours));
    std::printf("%-10s %10s %10.4f %10.2f\n", "tiktoken", "1 MB", theirs_word, word.size() / 1e6 / theirs_word);
    std::printf("%s\n", nlohmann::json{{"bench", "tokenizer"}, {"mb", mb}, {"tokens", ids.size()},
                                       {"llmtrain_mb_s", mb / ours}, {"tiktoken_mb_s", mb / theirs},
                                       {"speedup", theirs / ours}, {"ids_identical", equal},
                                       {"word_1mb_s", ours_word}, {"word_64kb_s", ours_small},
                                       {"tiktoken_word_64kb_s", theirs_small}, {"tiktoken_word_1mb_s", theirs_word}}
                            .dump()
                            .c_str());
    return equal ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
}
