// bench_generate: generation of a model preset (GPT-2 124M unless --model names another, e.g.
// llama-3.2-1b) on the GPU in bfloat16 (random weights: the speed does not depend on them), greedy, a prompt of
// --prompt random ids and --new new tokens, at batch 1 and 16. Rows, each timed in the same run:
//   llmtrain        infer::Generator: KV cache, llmtrain's kernels, the decode step as a CUDA graph
//   llmtrain-eager  the same, the decode step launched op by op
//   llmtrain-no-gemv the graph with the few-row products off ("gemv": cuBLASLt and separate norms)
//   libtorch        the same loop op by op with every op on its ATen path (kernels off): plain
//                   LibTorch with a KV cache
//   hf              Hugging Face transformers' forward loop with its KV cache (Python; --no-hf skips)
// ms/token is the decode step: (time of N new tokens - time of 1) / (N - 1), medians over --repeat
// runs; tok/s counts every row's new tokens over the whole call, prompt included.
//   build/bin/bench_generate [--model gpt2] [--batch 1 --batch 16] [--prompt 64] [--new 256] [--repeat 5] [--sample]
#include <cuda_profiler_api.h>
#include <llmtrain/llmtrain.h>
#include <torch/cuda.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "cli.h"
#include "peer.h"

namespace {

struct Row {
  std::string name;
  int64_t batch;
  double seconds, seconds_prompt;  // medians: N new tokens; 1 new token
};

// The decode step's ms a token: (time of N tokens - time of 1) / (N - 1).
double ms_per_token(const Row& r, int64_t new_tokens) {
  return (r.seconds - r.seconds_prompt) / double(new_tokens - 1) * 1e3;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Variant {
  std::string name;
  bool kernels, graph;
  llmtrain::infer::SamplingOptions sampling;
  std::string without = {};  // one op's kernel off
};

bool profile = false;  // --profile

Row run(const Variant& v, const std::shared_ptr<llmtrain::nn::CausalLM>& model, int64_t B, int64_t prompt_len,
        int64_t new_tokens, int repeat) {
  llmtrain::ops::set_cuda_kernels_enabled(v.kernels);
  if (!v.without.empty()) llmtrain::ops::set_cuda_kernel_enabled(v.without, false);
  llmtrain::infer::GeneratorOptions go;
  go.cuda_graph = v.graph;
  llmtrain::infer::Generator gen(model, go);
  torch::manual_seed(1337);
  const auto ids = torch::randint(model->vocab_size(), {B, prompt_len}, torch::kInt);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b)
    prompts[size_t(b)] = std::vector<int32_t>(ids[b].data_ptr<int32_t>(), ids[b].data_ptr<int32_t>() + prompt_len);
  const auto timed = [&](int64_t n) {
    std::vector<double> t;
    for (int i = 0; i < repeat; ++i) {
      const auto t0 = std::chrono::steady_clock::now();
      const auto out = gen.generate(prompts, n, v.sampling);
      t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      LLMTRAIN_CHECK(int64_t(out[0].size()) == n, "bench_generate: ", v.name, " made ", out[0].size(), " tokens, not ",
                     n);
    }
    return median(t);
  };
  gen.generate(prompts, 8, v.sampling);  // warm-up: cuBLAS handles, the graph's capture
  if (profile) cudaProfilerStart();      // ncu --profile-from-start off: the timed tokens alone
  const double all = timed(new_tokens);
  if (profile) cudaProfilerStop();
  Row r{v.name, B, all, timed(1)};
  llmtrain::ops::set_cuda_kernels_enabled(true);
  if (!v.without.empty()) llmtrain::ops::set_cuda_kernel_enabled(v.without, true);
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Generation (bf16) of a model preset: llmtrain's KV-cache Generator against LibTorch and transformers"};
  llmtrain_cli::setup(app, "bench_generate --sample");
  std::vector<int64_t> batches;
  int64_t prompt_len = 64, new_tokens = 256;
  int repeat = 5;
  bool no_hf = false, sample = false;
  std::string python = LLMTRAIN_PYTHON, model_name = "gpt2";
  app.add_option("--model", model_name, "a preset of either family (gpt2, llama-3.2-1b, ...; nn::ModelSpec::preset)")
      ->capture_default_str();
  app.add_option("--batch", batches, "batch sizes (repeatable; default 1 and 16)");
  app.add_option("--prompt", prompt_len, "prompt length")->capture_default_str();
  app.add_option("--new", new_tokens, "new tokens per row")->capture_default_str()->check(CLI::Range(2, 4096));
  app.add_option("--repeat", repeat, "timed runs of each; the median counts")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_flag("--sample", sample, "also run llmtrain sampling (temperature 1, top-k 50, top-p 0.9) instead of greedy");
  app.add_flag("--no-hf", no_hf, "skip the transformers baseline");
  app.add_flag("--profile", profile,
               "run the llmtrain row alone, its timed tokens inside the profiler's range (benchmarks/profile_step.py "
               "-- build/bin/bench_generate --profile ...: each decode kernel's time)");
  app.add_option("--python", python, "Python with torch and transformers (default: the one CMake found)")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (batches.empty()) batches = {1, 16};
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_generate: needs a CUDA device\n");
    return 1;
  }
  std::vector<Row> rows;
  const auto keep = [&](const Row& r) {  // a line as each row finishes: a run cut short keeps what it measured
    rows.push_back(r);
    std::printf("done: %s %s B=%lld: %.3f ms/token\n", model_name.c_str(), r.name.c_str(),
                static_cast<long long>(r.batch), ms_per_token(r, new_tokens));
    std::fflush(stdout);
  };
  try {
    torch::manual_seed(1337);
    const auto model = llmtrain::nn::make_model(llmtrain::nn::ModelSpec::preset(model_name));
    model->module().to(torch::kCUDA, torch::kBFloat16);
    llmtrain::infer::SamplingOptions greedy;
    greedy.temperature = 0;
    llmtrain::infer::SamplingOptions warm;
    warm.top_k = 50;
    warm.top_p = 0.9;
    for (int64_t B : batches) {
      keep(run({"llmtrain", true, true, greedy}, model, B, prompt_len, new_tokens, repeat));
      if (profile) continue;
      keep(run({"llmtrain-eager", true, false, greedy}, model, B, prompt_len, new_tokens, repeat));
      keep(run({"llmtrain-no-gemv", true, true, greedy, "gemv"}, model, B, prompt_len, new_tokens, repeat));
      keep(run({"libtorch", false, false, greedy}, model, B, prompt_len, new_tokens, repeat));
      if (sample) keep(run({"llmtrain-sample", true, true, warm}, model, B, prompt_len, new_tokens, repeat));
    }
    if (!no_hf && !profile) {
      std::vector<std::string> args = {model_name, std::to_string(prompt_len), std::to_string(new_tokens),
                                       std::to_string(repeat)};
      for (int64_t B : batches) args.push_back(std::to_string(B));
      try {
        const auto hf =
            bench::run_python_json(python, std::string(LLMTRAIN_SOURCE_DIR) + "/benchmarks/hf_generate_speed.py", args);
        for (int64_t B : batches) {
          const auto& h = hf.at(std::to_string(B));
          keep({"hf", B, h.at("seconds").get<double>(), h.at("seconds_prompt").get<double>()});
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_generate: no transformers row: %s\n", e.what());
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_generate: %s\n", e.what());
    return 1;
  }
  std::printf("%s bf16, prompt %lld, %lld new tokens, median of %d\n", model_name.c_str(),
              static_cast<long long>(prompt_len), static_cast<long long>(new_tokens), repeat);
  std::printf("%-16s %5s %10s %11s %12s %10s %8s\n", "path", "B", "ms/token", "prompt ms", "tok/s", "vs libtorch",
              "vs hf");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : rows) {
    const double step_ms = ms_per_token(r, new_tokens);
    const double tok_s = double(r.batch * new_tokens) / r.seconds;
    const auto base = [&](const char* name) {
      for (const auto& b : rows)
        if (b.batch == r.batch && b.name == name)
          return (b.seconds - b.seconds_prompt) / (r.seconds - r.seconds_prompt);
      return 0.0;
    };
    std::printf("%-16s %5lld %10.3f %11.2f %12.0f %9.2fx %7.2fx\n", r.name.c_str(), static_cast<long long>(r.batch),
                step_ms, r.seconds_prompt * 1e3, tok_s, base("libtorch"), base("hf"));
    out.push_back({{"model", model_name},
                   {"path", r.name},
                   {"batch", r.batch},
                   {"prompt", prompt_len},
                   {"new_tokens", new_tokens},
                   {"ms_per_token", step_ms},
                   {"prompt_ms", r.seconds_prompt * 1e3},
                   {"tokens_per_s", tok_s},
                   {"speedup_vs_libtorch", base("libtorch")},
                   {"speedup_vs_hf", base("hf")}});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
