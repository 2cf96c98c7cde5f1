// bench_tokenizer: GPT-2 BPE encoding speed of llmtrain against tiktoken (its Rust core, through
// Python), both single-threaded, on the same text in the same run. The text is the State of the
// Union corpus, all speeches joined in file order. A second row times the `tokenize` program as a whole
// process (start, read stdin, encode, write the JSON array) against tiktoken's encode call alone.
//   build/bin/bench_tokenizer --data ../shared/data [--repeat 5]
#include <dirent.h>
#include <fcntl.h>
#include <llmtrain/text.h>
#include <sys/wait.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
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

uint64_t checksum(const std::vector<int32_t>& ids) {
  uint64_t sum = 0;
  for (size_t i = 0; i < ids.size(); ++i) sum = (sum + (i + 1) * uint64_t(ids[i])) % (1ull << 61);
  return sum;
}

/// Seconds `program args...` takes from fork to exit, stdin read from `in` and stdout written to `out`.
double time_process(const std::string& program, const std::vector<std::string>& args, const std::string& in,
                    const std::string& out) {
  std::vector<char*> argv{const_cast<char*>(program.c_str())};
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  LLMTRAIN_CHECK(pid >= 0, "bench_tokenizer: fork failed");
  if (pid == 0) {
    const int fd_in = ::open(in.c_str(), O_RDONLY), fd_out = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd_in < 0 || fd_out < 0 || ::dup2(fd_in, 0) < 0 || ::dup2(fd_out, 1) < 0) ::_exit(126);
    ::execv(program.c_str(), argv.data());
    ::_exit(127);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  LLMTRAIN_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "bench_tokenizer: ", program, " failed (wait status ",
                 status, ")");
  return seconds;
}

/// The folder of this program: tokenize is built beside it.
std::string own_dir() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  LLMTRAIN_CHECK(n > 0, "bench_tokenizer: cannot read /proc/self/exe");
  const std::string exe(buf, size_t(n));
  return exe.substr(0, exe.rfind('/'));
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
  app.add_option("--repeat", repeat, "runs of each; the best counts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
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
    const uint64_t ids_checksum = checksum(ids);

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
    double process = 1e30;
    bool process_equal = false;
    try {
      const std::string tokenize = own_dir() + "/tokenize";
      for (int i = 0; i < repeat; ++i)
        process = std::min(
            process, time_process(tokenize, {"--vocab-dir", data + "/gpt2"}, tmp + "/corpus.txt", tmp + "/ids.json"));
      const auto printed = llmtrain::tokenizer::parse_ids(llmtrain::fs::read_file(tmp + "/ids.json"),
                                                          "tokenize's output", tok->vocab_size());
      process_equal = printed == ids;
      peer = bench::run_python_json(python, script, {data + "/gpt2", tmp + "/corpus.txt", std::to_string(repeat)});
      peer_word = bench::run_python_json(python, script, {data + "/gpt2", tmp + "/word.txt", std::to_string(repeat)});
      peer_big_word =
          bench::run_python_json(python, script, {data + "/gpt2", tmp + "/big_word.txt", std::to_string(repeat)});
    } catch (...) {
      llmtrain::fs::remove_tree(tmp);
      throw;
    }
    llmtrain::fs::remove_tree(tmp);
    const double theirs = peer["seconds"].get<double>();
    const bool equal = peer["tokens"].get<size_t>() == ids.size() && peer["checksum"].get<uint64_t>() == ids_checksum;

    std::printf("GPT-2 BPE, %.1f MB of text, %zu tokens, best of %d, one thread\n", mb, ids.size(), repeat);
    std::printf("%-10s %10s %10s\n", "encoder", "seconds", "MB/s");
    std::printf("%-10s %10.3f %10.2f\n", "llmtrain", ours, mb / ours);
    std::printf("%-10s %10.3f %10.2f\n", "tiktoken", theirs, mb / theirs);
    std::printf("speed-up %.2fx, ids %s\n", theirs / ours, equal ? "identical" : "DIFFERENT");
    std::printf("%-34s %10.3f %10.2f\n", "tokenize (whole process, JSON out)", process, mb / process);
    std::printf("against tiktoken's encode call alone: %.2fx, ids %s\n", theirs / process,
                process_equal ? "identical" : "DIFFERENT");
    const double theirs_small = peer_word["seconds"].get<double>(),
                 theirs_word = peer_big_word["seconds"].get<double>();
    std::printf("one word without spaces (a single piece to merge):\n");
    std::printf("%-10s %10s %10s %10s\n", "encoder", "word", "seconds", "MB/s");
    std::printf("%-10s %10s %10.4f %10.2f\n", "llmtrain", "64 KB", ours_small, small_word.size() / 1e6 / ours_small);
    std::printf("%-10s %10s %10.4f %10.2f\n", "tiktoken", "64 KB", theirs_small,
                small_word.size() / 1e6 / theirs_small);
    std::printf("%-10s %10s %10.4f %10.2f  (%.2fx its speed on the corpus)\n", "llmtrain", "1 MB", ours_word,
                word.size() / 1e6 / ours_word, (word.size() / ours_word) / (text.size() / ours));
    std::printf("%-10s %10s %10.4f %10.2f\n", "tiktoken", "1 MB", theirs_word, word.size() / 1e6 / theirs_word);
    std::printf("%s\n", nlohmann::json{{"bench", "tokenizer"},
                                       {"mb", mb},
                                       {"tokens", ids.size()},
                                       {"llmtrain_mb_s", mb / ours},
                                       {"tiktoken_mb_s", mb / theirs},
                                       {"speedup", theirs / ours},
                                       {"ids_identical", equal},
                                       {"tokenize_process_s", process},
                                       {"tokenize_process_speedup", theirs / process},
                                       {"tokenize_ids_identical", process_equal},
                                       {"word_1mb_s", ours_word},
                                       {"word_64kb_s", ours_small},
                                       {"tiktoken_word_64kb_s", theirs_small},
                                       {"tiktoken_word_1mb_s", theirs_word}}
                            .dump()
                            .c_str());
    return equal && process_equal ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_tokenizer: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
}
