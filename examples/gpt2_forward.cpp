// gpt2_forward: builds a GPT-2 preset with random weights, runs forward and backward on random tokens
// and reports its size, the loss and the time per pass. A first check that llmtrain works on a
// machine, CPU or GPU, before any data exists:
//   build/bin/gpt2_forward --preset gpt2 --device cuda --batch 4 --seq 1024
#include <llmtrain/llmtrain.h>
#include <torch/cuda.h>
#include <torch/utils.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"Run a randomly initialised GPT-2 forward and backward and time it"};
  llmtrain_cli::setup(app, "gpt2_forward --preset gpt2 --batch 4 --seq 256");
  std::string preset = "tiny", device = "cpu";
  int64_t batch = 4, seq = 64;
  int iters = 3;
  app.add_option("--preset", preset, "tiny, gpt2, gpt2-medium, gpt2-large or gpt2-xl")->capture_default_str();
  app.add_option("--device", device, "cpu or cuda")->capture_default_str()->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--batch", batch, "sequences per pass")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--seq", seq, "tokens per sequence")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--iters", iters, "timed passes after one warm-up")->capture_default_str()->check(CLI::PositiveNumber);
  CLI11_PARSE(app, argc, argv);

  try {
    if (device == "cuda" && !torch::cuda::is_available()) {
      std::fprintf(stderr, "gpt2_forward: --device cuda, but no CUDA device is visible\n");
      return 1;
    }
    const auto cfg = llmtrain::nn::GPT2Config::preset(preset);
    llmtrain::nn::GPT2 model(cfg);
    model->to(torch::Device(device));
    std::printf("%s: %lld parameters, vocab %lld (padded to %lld), %lld layers\n", preset.c_str(),
                static_cast<long long>(model->num_parameters()), static_cast<long long>(cfg.vocab_size()),
                static_cast<long long>(cfg.padded_vocab_size()), static_cast<long long>(cfg.n_layer()));

    const auto opts = torch::TensorOptions().dtype(torch::kLong).device(torch::Device(device));
    const auto idx = torch::randint(cfg.vocab_size(), {batch, seq}, opts);
    const auto targets = torch::randint(cfg.vocab_size(), {batch, seq}, opts);
    double loss = 0, ms = 0;
    for (int i = 0; i <= iters; ++i) {  // pass 0 warms up
      const auto start = std::chrono::steady_clock::now();
      model->zero_grad();
      auto out = model(idx, targets);
      out.loss.backward();
      loss = out.loss.item<double>();  // waits for the device
      const double elapsed =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
      if (i > 0) ms += elapsed / iters;
    }
    std::printf("loss %.4f (ln vocab %.4f), forward+backward %.1f ms, %.0f tokens/s on %s\n", loss,
                std::log(double(cfg.vocab_size())), ms, batch * seq / (ms / 1e3), device.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt2_forward: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
  return 0;
}
