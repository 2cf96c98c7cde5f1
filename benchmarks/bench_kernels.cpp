// bench_kernels: each fused kernel against the ATen composite it replaces, in the same run, at GPT-2
// 124M's training sizes (B=16, T=1024). Reports the time, the bandwidth the kernel's minimal memory
// traffic implies (against the H200's 4.8 TB/s) and the speedup.
//   build/bin/bench_kernels --iters 50
#include <ATen/Context.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAGuard.h>
#include <llmtrain/llmtrain.h>
#include <torch/autograd.h>
#include <torch/cuda.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "cli.h"

namespace {

// The GPU's time per call of f, between two events. A spin kernel first holds the GPU while the host
// queues every call, so the host's own cost per call (autograd, allocation, launches) stays out of the
// figure unless it exceeds the GPU's.
double time_ms(const std::function<void()>& f, int iters) {
  for (int i = 0; i < 3; ++i) f();
  torch::cuda::synchronize();
  at::cuda::sleep(int64_t(2e8));  // ~100 ms at ~2 GHz
  at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
  start.record();
  for (int i = 0; i < iters; ++i) f();
  stop.record();
  stop.synchronize();
  return double(start.elapsed_time(stop)) / iters;
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
  llmtrain_cli::setup(app, "bench_kernels --iters 20");
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
  // Layer norm fused with the residual add before it (h = x + delta), both outputs used downstream.
  {
    const int64_t N = 16 * 1024, C = 768;
    const auto bf16 = cuda.dtype(torch::kBFloat16);
    const auto x = torch::randn({N, C}, bf16).requires_grad_(), delta = torch::randn({N, C}, bf16).requires_grad_();
    const auto w = torch::randn({C}, bf16).requires_grad_(), b = torch::randn({C}, bf16).requires_grad_();
    const auto dy = torch::randn({N, C}, bf16), dh = torch::randn({N, C}, bf16);
    // forward: x, delta in, h, y out; backward: dy, h, dh in, dh_total out
    const double bytes = double(N * C) * 2 * 8;
    results.push_back(compare(
        "residual add + layer_norm fwd+bwd (16384 x 768)", bytes,
        [&] {
          for (const auto* t : {&x, &delta, &w, &b}) t->mutable_grad() = torch::Tensor();
          const auto [h, y] = llmtrain::ops::add_layer_norm(x, delta, w, b);
          torch::autograd::backward({y, h}, {dy, dh});
        },
        iters));
  }
  // GELU: the MLP's (B=16, T=1024, 4C=3072) pre-activations, bf16, forward and backward.
  {
    const int64_t n = 16 * 1024 * 3072;
    const auto x = torch::randn({n}, cuda.dtype(torch::kBFloat16)).requires_grad_();
    const auto dy = torch::randn({n}, cuda.dtype(torch::kBFloat16));
    const double bytes = double(n) * 2 * 5;  // forward: x in, y out; backward: dy and x in, dx out
    results.push_back(compare(
        "gelu fwd+bwd (16384 x 3072 bf16)", bytes,
        [&] {
          x.mutable_grad() = torch::Tensor();
          llmtrain::ops::gelu(x).backward(dy);
        },
        iters));
  }
  // A linear layer, the MLP's first (768 -> 3072, B=16, T=1024 rows), bf16, forward and backward:
  // ATen's products on flattened rows with the bias gradient in the weight product's epilogue, against
  // at::linear and its column sum. TFLOP/s-bound too: see the speedup.
  {
    const int64_t B = 16, T = 1024, C = 768, H = 3072;
    const auto bf16 = cuda.dtype(torch::kBFloat16);
    const auto x = torch::randn({B, T, C}, bf16).requires_grad_(), dy = torch::randn({B, T, H}, bf16);
    const auto w = (0.03 * torch::randn({H, C}, bf16)).requires_grad_(), b = torch::randn({H}, bf16).requires_grad_();
    const double bytes = double(B * T) * (C + H) * 2 * 3;  // x, y and their gradients, roughly
    results.push_back(compare(
        "linear fwd+bwd (16384 x 768 -> 3072 bf16)", bytes,
        [&] {
          for (const auto* t : {&x, &w, &b}) t->mutable_grad() = torch::Tensor();
          llmtrain::ops::linear(x, w, b).backward(dy);
        },
        iters));
  }
  // fp8 products (train.fp8): the MLP's first layer at GPT-2 124M's and XL's widths, forward and
  // backward with the casts, the amaxes and a bias, against llmtrain's bf16 layer (in the "ATen" column
  // here). The scales come from one pass's amaxes, as after a first step.
  std::vector<std::pair<std::string, double>> fp8_rows;
  llmtrain::ops::set_cuda_kernel_enabled("fp8", true);  // off at start
  // A failure here (session 28: cuBLASLt refusing the products) is said and the rest still measured.
  for (const auto& [C, H] : {std::pair<int64_t, int64_t>{768, 3072}, {1600, 6400}}) {
    try {
      const int64_t N = 16 * 1024;
      const auto bf16 = cuda.dtype(torch::kBFloat16);
      const auto x = torch::randn({N, C}, bf16).requires_grad_(), dy = torch::randn({N, H}, bf16) * 1e-3;
      const auto w = (0.03 * torch::randn({H, C}, bf16)).requires_grad_(), b = torch::randn({H}, bf16).requires_grad_();
      const auto s = llmtrain::ops::fp8_scaling(16, torch::kCUDA);
      llmtrain::ops::fp8_linear(x, w, b, s).backward(dy);
      llmtrain::ops::fp8_update_scales(s, 0);
      const auto clear = [&] {
        for (const auto* t : {&x, &w, &b}) t->mutable_grad() = torch::Tensor();
      };
      const double fp8 = time_ms(
          [&] {
            clear();
            llmtrain::ops::fp8_linear(x, w, b, s).backward(dy);
          },
          iters);
      const double plain = time_ms(
          [&] {
            clear();
            llmtrain::ops::linear(x, w, b).backward(dy);
          },
          iters);
      const std::string shape = std::to_string(N) + "x" + std::to_string(C) + "->" + std::to_string(H);
      results.push_back({"fp8 linear fwd+bwd " + shape + " vs bf16", fp8, plain, double(N) * (C + H) * 2 * 3});
      fp8_rows.emplace_back("  fp8 TFLOP/s (" + shape + ")", 6.0 * N * C * H / (fp8 * 1e-3) / 1e12);
      fp8_rows.emplace_back("  bf16 TFLOP/s (" + shape + ")", 6.0 * N * C * H / (plain * 1e-3) / 1e12);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "fp8 linear %lld -> %lld: %s\n", static_cast<long long>(C), static_cast<long long>(H),
                   e.what());
    }
  }
  // GPT-2 124M's MLP (C=768, H=3072) on B=16, T=1024 tokens, bf16: two products with the bias, GELU,
  // GELU's gradient and the bias gradients in their epilogues, against ATen's linear, gelu and sums.
  // The figure here is TFLOP/s-bound, so the bandwidth column means little: see the speedup.
  {
    const int64_t N = 16 * 1024, C = 768, H = 3072;
    const auto bf16 = cuda.dtype(torch::kBFloat16);
    const auto x = torch::randn({N, C}, bf16).requires_grad_(), dy = torch::randn({N, C}, bf16);
    const auto fw = (0.03 * torch::randn({H, C}, bf16)).requires_grad_(), fb = torch::randn({H}, bf16).requires_grad_();
    const auto pw = (0.02 * torch::randn({C, H}, bf16)).requires_grad_(), pb = torch::randn({C}, bf16).requires_grad_();
    const double bytes = double(N) * (C * 2 + H * 2) * 2 * 3;  // x, h, g, y and their gradients, roughly
    llmtrain::ops::set_cuda_kernel_enabled("mlp", true);       // off by default; compare() turns all off for ATen
    results.push_back(compare(
        "mlp fwd+bwd (16384 x 768 -> 3072 -> 768)", bytes,
        [&] {
          for (const auto* t : {&x, &fw, &fb, &pw, &pb}) t->mutable_grad() = torch::Tensor();
          llmtrain::ops::mlp(x, fw, fb, pw, pb).backward(dy);
        },
        iters));
    llmtrain::ops::set_cuda_kernel_enabled("mlp", false);
  }
  // The embedding: GPT-2's wte (50304 x 768) and wpe gathered for B=16, T=1024, and the backward's
  // deterministic sums into both (text-like ids: a few very common ones).
  {
    const int64_t B = 16, T = 1024, C = 768, V = 50304;
    const auto bf16 = cuda.dtype(torch::kBFloat16);
    const auto wte = torch::randn({V, C}, bf16).requires_grad_(), wpe = torch::randn({T, C}, bf16).requires_grad_();
    auto idx = torch::randint(50257, {B, T}, cuda.dtype(torch::kLong));
    idx.masked_fill_(torch::rand({B, T}, cuda) < 0.05, 13);  // "," is about 5% of English GPT-2 tokens
    idx.masked_fill_(torch::rand({B, T}, cuda) < 0.05, 262);
    const auto dout = torch::randn({B, T, C}, bf16);
    llmtrain::ops::IdCheck ids;
    // forward: rows in, x out; backward: dout in, dwte zeroed (its rows of present ids written again)
    const double bytes = double(B * T * C) * 2 * 3 + double(V * C) * 2;
    results.push_back(compare(
        "embedding fwd+bwd (16 x 1024 of 50304 x 768)", bytes,
        [&] {
          for (const auto* t : {&wte, &wpe}) t->mutable_grad() = torch::Tensor();
          if (llmtrain::ops::cuda_kernels_enabled()) llmtrain::ops::embedding(idx, wte, wpe, 50257, ids).backward(dout);
          else  // the ATen composite alone (the op's ATen path also waits for its id check)
            (at::embedding(wte, idx) + wpe).backward(dout);
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

  // Attention: llmtrain's Hopper kernels (the "attention" switch; llmtrain-fp8 with "attention_fp8" too, the
  // forward's products in fp8 from codes made in each call) against ATen's scaled-dot-product backends,
  // causal, bf16, q/k/v views of one (B, T, (H + 2 KV) D) tensor, forward alone and forward + backward: GPT-2
  // 124M's heads (D = 64) and heads of 128.
  struct AttentionRow {
    std::string shape, path;
    double fwd_ms, step_ms, flops;  // flops: of the forward
  };
  std::vector<AttentionRow> attention;
  {
    struct Shape {
      const char* name;
      int64_t B, H, KV, T, D;
    };
    auto& ctx = at::globalContext();
    const bool flash = ctx.userEnabledFlashSDP(), eff = ctx.userEnabledMemEfficientSDP(),
               cudnn = ctx.userEnabledCuDNNSDP(), math = ctx.userEnabledMathSDP();
    const bool ours = llmtrain::ops::cuda_kernel_enabled("attention");
    for (const Shape& sh :
         {Shape{"B16 H12 T1024 D64", 16, 12, 12, 1024, 64}, Shape{"B8 H16 T1024 D128", 8, 16, 16, 1024, 128}}) {
      const int64_t width = (sh.H + 2 * sh.KV) * sh.D;
      const auto qkv = torch::randn({sh.B, sh.T, width}, cuda.dtype(torch::kBFloat16)).requires_grad_();
      const auto dy = torch::randn({sh.B, sh.H, sh.T, sh.D}, cuda.dtype(torch::kBFloat16));
      const auto run = [&](bool backward) {
        qkv.mutable_grad() = torch::Tensor();
        const auto heads = [&](int64_t at, int64_t n) {
          return qkv.narrow(2, at * sh.D, n * sh.D).view({sh.B, sh.T, n, sh.D}).transpose(1, 2);
        };
        const auto y = llmtrain::ops::attention(heads(0, sh.H), heads(sh.H, sh.KV), heads(sh.H + sh.KV, sh.KV));
        if (backward) y.backward(dy);
      };
      const std::pair<const char*, int> paths[] = {
          {"llmtrain", -1}, {"llmtrain-fp8", -2}, {"sdpa-flash", 0}, {"sdpa-cudnn", 1}, {"sdpa-efficient", 2}};
      for (const auto& [name, which] : paths) {
        llmtrain::ops::set_cuda_kernel_enabled("attention", which < 0);
        llmtrain::ops::set_cuda_kernel_enabled("attention_fp8", which == -2);
        ctx.setSDPUseFlash(which == 0);
        ctx.setSDPUseCuDNN(which == 1);
        ctx.setSDPUseMemEfficient(which == 2);
        ctx.setSDPUseMath(false);
        try {
          const double fwd = time_ms([&] { run(false); }, iters), step = time_ms([&] { run(true); }, iters);
          attention.push_back({sh.name, name, fwd, step, 2.0 * sh.B * sh.H * sh.T * sh.T * sh.D});
        } catch (const std::exception& e) {
          std::fprintf(stderr, "attention %s %s: %s\n", sh.name, name, e.what());
        }
      }
    }
    llmtrain::ops::set_cuda_kernel_enabled("attention", ours);
    llmtrain::ops::set_cuda_kernel_enabled("attention_fp8", false);
    ctx.setSDPUseFlash(flash);
    ctx.setSDPUseMemEfficient(eff);
    ctx.setSDPUseCuDNN(cudnn);
    ctx.setSDPUseMath(math);
  }

  // NF4 (QLoRA's base): dequantizing a Llama-3.2-1B MLP weight for a training product, and a decode
  // step's products at batch 1 with the weights read in 4 bits (the 112 linear layers of the
  // Llama-3.2-1B shape, 0.5 GB: well past L2), against the bf16 weights' cuBLAS products, and a device
  // copy as the bandwidth this GPU reaches.
  std::vector<std::pair<std::string, double>> nf4_rows;
  {
    namespace ops = llmtrain::ops;
    const auto bf16 = cuda.dtype(torch::kBFloat16);
    const auto big = ops::nf4_quantize(torch::randn({8192, 2048}, bf16) * 0.02);
    const double n = 8192.0 * 2048;
    results.push_back(compare(
        "nf4 dequantize (8192 x 2048 to bf16)", n / 2 + n / 64 + n * 2,
        [&] { ops::nf4_dequantize(big, torch::kBFloat16); }, iters));
    const std::vector<std::pair<int64_t, int64_t>> layer{{2048, 2048}, {512, 2048},  {512, 2048}, {2048, 2048},
                                                         {8192, 2048}, {8192, 2048}, {2048, 8192}};
    std::vector<ops::NF4Weight> q;
    std::vector<torch::Tensor> w;
    double nf4_bytes = 0, bf16_bytes = 0;
    for (int l = 0; l < 16; ++l)
      for (const auto& [rows, cols] : layer) {
        w.push_back(torch::randn({rows, cols}, bf16) * 0.02);
        q.push_back(ops::nf4_quantize(w.back()));
        nf4_bytes += double(rows * cols) / 2 + double(rows * cols) / 64;
        bf16_bytes += double(rows * cols) * 2;
      }
    const auto x2048 = torch::randn({1, 2048}, bf16), x8192 = torch::randn({1, 8192}, bf16);
    torch::NoGradGuard no_grad;
    results.push_back(compare(
        "nf4 x 1 row: 112 products of Llama-3.2-1B", nf4_bytes,
        [&] {
          for (const auto& t : q) ops::nf4_linear(t.shape[1] == 2048 ? x2048 : x8192, t);
        },
        std::max(1, iters / 5)));
    // Products replayed as one CUDA graph (the launches' gaps gone, as in a graphed decode step): the
    // 112, and each shape's 16 in turn (each weight read from memory, not L2).
    const auto graphed_ms = [&](const std::vector<size_t>& which) {
      at::cuda::CUDAStream side = at::cuda::getStreamFromPool();
      at::cuda::CUDAGraph graph;
      side.synchronize();
      {
        const at::cuda::CUDAStreamGuard guard(side);
        graph.capture_begin();
        for (const size_t i : which) ops::nf4_linear(q[i].shape[1] == 2048 ? x2048 : x8192, q[i]);
        graph.capture_end();
      }
      return time_ms([&] { graph.replay(); }, std::max(1, iters / 5));
    };
    std::vector<size_t> all(q.size());
    for (size_t i = 0; i < q.size(); ++i) all[i] = i;
    const double ms = graphed_ms(all);
    nf4_rows.emplace_back("nf4 x 1 row, the 112 as one CUDA graph, ms", ms);
    nf4_rows.emplace_back("  their GB/s", nf4_bytes / (ms * 1e-3) / 1e9);
    std::vector<std::pair<std::string, double>> shape_gbs;
    for (const size_t first : {size_t(0), size_t(1), size_t(4), size_t(6)}) {  // q, k, gate, down
      std::vector<size_t> same;
      for (size_t i = first; i < q.size(); i += layer.size()) same.push_back(i);
      const auto [rows, cols] = layer[first];
      const double bytes = 16.0 * (double(rows * cols) / 2 + double(rows * cols) / 64);
      shape_gbs.emplace_back("  " + std::to_string(rows) + " x " + std::to_string(cols) + ", the 16 in a graph, GB/s",
                             bytes / (graphed_ms(same) * 1e-3) / 1e9);
    }
    nf4_rows.emplace_back("the same products, bf16 weights (cuBLAS), ms",
                          time_ms(
                              [&] {
                                for (const auto& t : w) at::linear(t.size(1) == 2048 ? x2048 : x8192, t);
                              },
                              std::max(1, iters / 5)));
    const auto src = torch::empty({int64_t(1) << 30}, cuda.dtype(torch::kByte)), dst = torch::empty_like(src);
    const double copy_ms = time_ms([&] { dst.copy_(src); }, std::max(1, iters / 5));
    const double copy_gbs = 2.0 * double(int64_t(1) << 30) / (copy_ms * 1e-3) / 1e9;
    nf4_rows.emplace_back("  their GB/s", bf16_bytes / (nf4_rows[2].second * 1e-3) / 1e9);
    nf4_rows.emplace_back("device copy of 1 GiB, GB/s read + written", copy_gbs);
    const Result& gemv = results.back();
    nf4_rows.emplace_back("nf4 x 1 row GB/s, of the device copy's (%)",
                          100 * gemv.bytes / (gemv.fused_ms * 1e-3) / 1e9 / copy_gbs);
    nf4_rows.emplace_back("  as one CUDA graph, of the device copy's (%)", 100 * nf4_rows[1].second / copy_gbs);
    for (const auto& [name, gbs] : shape_gbs) {
      nf4_rows.emplace_back(name, gbs);
      nf4_rows.emplace_back("    of the device copy's (%)", 100 * gbs / copy_gbs);
    }
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
  // Causal attention: the forward's 2 B H T^2 D multiply-adds twice over, halved by the mask; backward 2.5x.
  for (const AttentionRow& r : attention) {
    const AttentionRow* cudnn = nullptr;
    for (const AttentionRow& o : attention)
      if (o.shape == r.shape && o.path == "sdpa-cudnn") cudnn = &o;
    const double fwd_ratio = cudnn ? cudnn->fwd_ms / r.fwd_ms : 0.0, ratio = cudnn ? cudnn->step_ms / r.step_ms : 0.0;
    std::printf(
        "attention %-18s %-15s fwd %8.3f ms %5.0f TFLOP/s %5.2fx cuDNN  fwd+bwd %8.3f ms %5.0f TFLOP/s %5.2fx cuDNN\n",
        r.shape.c_str(), r.path.c_str(), r.fwd_ms, r.flops / (r.fwd_ms * 1e-3) / 1e12, fwd_ratio, r.step_ms,
        3.5 * r.flops / (r.step_ms * 1e-3) / 1e12, ratio);
    out.push_back({{"kernel", "attention/" + r.shape + "/" + r.path},
                   {"fwd_ms", r.fwd_ms},
                   {"ms", r.step_ms},
                   {"fwd_vs_cudnn", fwd_ratio},
                   {"vs_cudnn", ratio}});
  }
  for (const auto& [name, value] : fp8_rows) {
    std::printf("%-44s %10.1f\n", name.c_str(), value);
    out.push_back({{"kernel", name}, {"value", value}});
  }
  for (const auto& [name, value] : nf4_rows) {
    std::printf("%-44s %10.3f\n", name.c_str(), value);
    out.push_back({{"kernel", name}, {"value", value}});
  }
  std::printf("%s\n", out.dump().c_str());
  return 0;
}
