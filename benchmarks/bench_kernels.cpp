// bench_kernels: each fused kernel against the ATen composite it replaces, in the same run, at GPT-2
// 124M's training sizes (B=16, T=1024). Reports the time, the bandwidth the kernel's minimal memory
// traffic implies (against the H200's 4.8 TB/s) and the speedup.
//   build/bin/bench_kernels --iters 50
#include <llmtrain/llmtrain.h>
#include <torch/cuda.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

namespace {

double time_ms(const std::function<void()>& f, int iters) {
  for (int i = 0; i < 3; ++i) f();
  torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < iters; ++i) f();
  torch::cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / iters;
}

struct Result {
  std::string kernel;
  double fused_ms, aten_ms, bytes;
};

// Fused and ATen times of f with the kernels on and off.
Result compare(const std::string& name, double bytes, const std::function<void()>& f, int iters) {
  llmtrain::ops::set_cuda_kernels_enabled(true);
  const double fused = time_ms(f, iters);
  llmtrain::ops::set_cuda_kernels_enabled(false);
  const double aten = time_ms(f, iters);
  llmtrain::ops::set_cuda_kernels_enabled(true);
  return {name, fused, aten, bytes};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Fused kernels against their ATen composites"};
  int iters = 50;
  double peak_tbs = 4.8;
  app.add_option("--iters", iters, "timed calls per kernel")->capture_default_str();
  app.add_option("--peak-tbs", peak_tbs, "the GPU's memory bandwidth in TB/s (H200: 4.8)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!torch::cuda::is_available()) {
    std::fprintf(stderr, "bench_kernels: needs a CUDA device\n");
    return 1;
  }
  const auto cuda = torch::TensorOptions().device(torch::kCUDA);
  std::vector<Result> results;

  // The classifier: GPT-2's padded logits of one B=16, T=1024 batch, forward and backward.
  {
    const int64_t N = 16 * 1024, Vp = 50304, V = 50257;
    const auto logits = torch::randn({N, Vp}, cuda.dtype(torch::kBFloat16)).requires_grad_();
    const auto targets = torch::randint(V, {N}, cuda.dtype(torch::kLong));
    const double bytes = 3.0 * double(N * Vp) * 2;  // read in forward; read and write in backward
    results.push_back(compare(
        "cross_entropy fwd+bwd (16384 x 50304 bf16)", bytes,
        [&] {
          logits.mutable_grad() = torch::Tensor();
          llmtrain::ops::cross_entropy(logits, targets, llmtrain::kIgnoreIndex, V).backward();
        },
        iters));
  }
  // Layer norm: one of GPT-2 124M's (B=16, T=1024, C=768), bf16, forward and backward.
  {
    const int64_t N = 16 * 1024, C = 768;
    const auto x = torch::randn({N, C}, cuda.dtype(torch::kBFloat16)).requires_grad_();
    const auto w = torch::randn({C}, cuda.dtype(torch::kBFloat16)).requires_grad_();
    const auto b = torch::randn({C}, cuda.dtype(torch::kBFloat16)).requires_grad_();
    const auto dout = torch::randn({N, C}, cuda.dtype(torch::kBFloat16));
    const double bytes = double(N * C) * 2 * 5;  // forward: x in, y out; backward: dout and x in, dx out
    results.push_back(compare(
        "layer_norm fwd+bwd (16384 x 768 bf16)", bytes,
        [&] {
          for (const auto* t : {&x, &w, &b}) t->mutable_grad() = torch::Tensor();
          llmtrain::ops::layer_norm(x, w, b).backward(dout);
        },
        iters));
  }
  // The optimizer: GPT-2 124M's tensors, bf16 gradients, fp32 masters and moments, bf16 copies.
  {
    llmtrain::nn::GPT2 model(llmtrain::nn::GPT2Config::preset("gpt2"));
    std::vector<torch::Tensor> masters, grads, m, v, params;
    std::vector<double> wd;
    int64_t n = 0;
    for (const auto& p : model->parameters()) {
      masters.push_back(p.detach().to(cuda.dtype(torch::kFloat)).clone());
      grads.push_back(1e-3 * torch::randn_like(masters.back()).to(torch::kBFloat16));
      m.push_back(torch::zeros_like(masters.back()));
      v.push_back(torch::zeros_like(masters.back()));
      params.push_back(masters.back().to(torch::kBFloat16));
      wd.push_back(p.dim() >= 2 ? 0.1 : 0.0);
      n += p.numel();
    }
    llmtrain::ops::AdamWHyper h;
    h.lr = 6e-4;
    h.beta2 = 0.95;
    const double bytes =
        double(n) * (2 + 4 + 2 + 4 + 4 + 4 + 4 + 4 + 2);  // norm: grad; AdamW: grad, m, v, master in+out, param
    results.push_back(compare(
        "grad norm + AdamW (124M, 148 tensors)", bytes,
        [&] {
          const auto ns = llmtrain::ops::grad_norm_scale(grads, 1.0, 1.0);
          llmtrain::ops::adamw_step(masters, grads, m, v, params, wd, h, ns);
        },
        iters));
  }

  std::printf("%-44s %10s %10s %9s %8s %8s\n", "kernel", "fused ms", "ATen ms", "GB/s", "of peak", "speedup");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& r : results) {
    const double gbs = r.bytes / (r.fused_ms * 1e-3) / 1e9;
    std::printf("%-44s %10.3f %10.3f %9.0f %7.1f%% %7.2fx\n", r.kernel.c_str(), r.fused_ms, r.aten_ms, gbs,
                100 * gbs / (peak_tbs * 1e3), r.aten_ms / r.fused_ms);
    out.push_back({{"kernel", r.kernel},
                   {"fused_ms", r.fused_ms},
                   {"aten_ms", r.aten_ms},
                   {"gb_per_s", gbs},
                   {"speedup", r.aten_ms / r.fused_ms}});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
