// bench_eval: a HellaSwag-sized multiple-choice set (10,042 examples x 4 endings; --data takes the real
// hellaswag_val.jsonl, else one of that size is made from the State of the Union corpus) scored by
// GPT-2 124M (random weights: the speed does not depend on them) in bf16 on the GPU. Rows, timed in
// the same run:
//   llmtrain B=N   eval::Task with N examples per forward (all their endings together): the model's
//                  fused forward, log-probabilities of the endings' ids alone
//   hf             transformers, the same examples per forward (benchmarks/hf_eval_speed.py) on the
//                  first --hf-limit examples, its time scaled to the whole set (--no-hf skips it)
// Tokenizing the file is timed apart ("read" seconds). The target: the whole set in under 15 s.
//   build/bin/bench_eval [--data hellaswag_val.jsonl] [--batch 16 --batch 64] [--hf-limit 1000]
#include <glob.h>
#include <llmtrain/core/fs.h>
#include <llmtrain/eval/tasks.h>
#include <llmtrain/nn/causal_lm.h>
#include <llmtrain/tokenizer/tokenizer.h>
#include <torch/cuda.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "peer.h"

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A HellaSwag-format file of `n` examples from the corpus' sentences: a context of one or two
// sentences, four endings of 60 to 140 characters (HellaSwag's sizes), the label cycling.
void make_set(const std::string& corpus_dir, const std::string& path, int64_t n) {
  std::vector<std::string> sentences;
  glob_t files{};
  const int rc = ::glob((corpus_dir + "/*.txt").c_str(), 0, nullptr, &files);
  LLMTRAIN_CHECK(rc == 0, "bench_eval: no .txt files in ", corpus_dir);
  for (size_t f = 0; f < files.gl_pathc && int64_t(sentences.size()) < 8 * n; ++f) {
    const std::string text = llmtrain::fs::read_file(files.gl_pathv[f]);
    size_t start = 0;
    for (size_t dot; (dot = text.find(". ", start)) != std::string::npos; start = dot + 2) {
      std::string s = text.substr(start, dot + 1 - start);
      std::replace(s.begin(), s.end(), '\n', ' ');
      const bool ascii = std::all_of(s.begin(), s.end(), [](char c) { return c > 0; });  // cut anywhere safely
      if (s.size() >= 60 && s.size() <= 400 && ascii) sentences.push_back(s);
    }
  }
  ::globfree(&files);
  LLMTRAIN_CHECK(sentences.size() > 100, "bench_eval: too few sentences in ", corpus_dir);
  std::string out;
  for (int64_t i = 0; i < n; ++i) {
    const auto at = [&](int64_t k) { return sentences[size_t((i * 7 + k) % int64_t(sentences.size()))]; };
    nlohmann::json endings = nlohmann::json::array();
    for (int e = 0; e < 4; ++e) {
      const std::string s = at(2 + e);
      endings.push_back(s.substr(0, std::min<size_t>(s.size(), size_t(60 + (i + e * 13) % 80))));
    }
    const std::string ctx = i % 2 ? at(0) : at(0) + " " + at(1);
    out += nlohmann::json{{"ctx", ctx}, {"endings", endings}, {"label", i % 4}}.dump() + "\n";
  }
  llmtrain::fs::write_file_atomic(path, out);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A HellaSwag-sized set scored by GPT-2 124M in bf16: llmtrain's eval::Task against transformers"};
  llmtrain_cli::setup(app, "bench_eval --batch 16 --batch 64");
  std::string data, python = LLMTRAIN_PYTHON;
  std::vector<int64_t> batches;
  int64_t hf_limit = 1000, examples = 10042;
  bool no_hf = false;
  app.add_option("--data", data, "a HellaSwag JSONL file (default: one made from $LLMTRAIN_DATA_DIR/sotu)");
  app.add_option("--examples", examples, "examples of the made set")->capture_default_str();
  app.add_option("--batch", batches, "examples per forward (repeatable; default 16 and 64)");
  app.add_option("--hf-limit", hf_limit, "examples the transformers row scores")->capture_default_str();
  app.add_flag("--no-hf", no_hf, "skip the transformers baseline");
  app.add_option("--python", python, "Python with torch and transformers (default: the one CMake found)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (batches.empty()) batches = {16, 64};
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_eval: needs a CUDA device\n");
    return 1;
  }
  try {
    const char* env = std::getenv("LLMTRAIN_DATA_DIR");
    const std::string data_dir = env ? env : std::string(LLMTRAIN_SOURCE_DIR) + "/../shared/data";
    std::string made;  // the set this run made, removed at its end
    if (data.empty()) {
      data = made = "/tmp/bench_eval_" + std::to_string(::getpid()) + ".jsonl";
      make_set(data_dir + "/sotu", data, examples);
    }
    const auto tok = llmtrain::tokenizer::load_tokenizer("gpt2", data_dir + "/gpt2");
    torch::manual_seed(1337);
    const auto model = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset("gpt2"));
    model->module().to(torch::kCUDA, torch::kBFloat16);
    struct Row {
      std::string name;
      double read_s, score_s;
      int64_t examples;
    };
    std::vector<Row> rows;
    for (int64_t b : batches) {
      llmtrain::eval::TaskConfig c;
      c.task = "hellaswag";
      c.data = {data};
      c.batch = b;
      auto t0 = std::chrono::steady_clock::now();
      const llmtrain::eval::Task task(c, *tok, std::nullopt, model->block_size());
      const double read_s = seconds_since(t0);
      c.limit = b;  // warm-up: cuBLAS handles, the allocator's blocks
      llmtrain::eval::Task(c, *tok, std::nullopt, model->block_size()).run(*model);
      torch::cuda::synchronize();
      t0 = std::chrono::steady_clock::now();
      const auto r = task.result(task.run(*model));
      torch::cuda::synchronize();
      rows.push_back({"llmtrain B=" + std::to_string(b), read_s, seconds_since(t0), r.counts[0].second});
    }
    const int64_t n = rows.front().examples;
    if (!no_hf) {
      try {
        const auto hf = bench::run_python_json(
            python, std::string(LLMTRAIN_SOURCE_DIR) + "/benchmarks/hf_eval_speed.py",
            {data, data_dir + "/gpt2", std::to_string(hf_limit), std::to_string(batches.front())});
        const double s = hf.at("seconds").get<double>() * double(n) / hf.at("examples").get<double>();
        rows.push_back({"hf B=" + std::to_string(batches.front()), 0, s, n});
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_eval: no transformers row: %s\n", e.what());
      }
    }
    std::printf("%lld examples x 4 endings, GPT-2 124M bf16 (%s)\n", static_cast<long long>(n), data.c_str());
    std::printf("%-16s %8s %9s %11s %12s\n", "path", "read s", "score s", "examples/s", "vs hf");
    nlohmann::json out = nlohmann::json::array();
    const double hf_s = rows.back().name.rfind("hf", 0) == 0 ? rows.back().score_s : NAN;
    for (const auto& r : rows) {
      std::printf("%-16s %8.2f %9.2f %11.0f", r.name.c_str(), r.read_s, r.score_s, double(n) / r.score_s);
      if (std::isnan(hf_s)) std::printf(" %12s\n", "-");  // no transformers row
      else std::printf(" %11.2fx\n", hf_s / r.score_s);
      out.push_back({{"path", r.name}, {"read_s", r.read_s}, {"score_s", r.score_s}, {"examples", n}});
    }
    std::printf("target: the whole set in under 15 s of scoring\n%s\n", out.dump().c_str());
    if (!made.empty()) std::remove(made.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_eval: %s\n", e.what());
    return 1;
  }
  return 0;
}
