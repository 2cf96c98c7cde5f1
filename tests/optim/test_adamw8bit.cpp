// 8-bit AdamW (ops/adamw.h's 8-bit moments): against bitsandbytes' AdamW8bit on its CPU build
// (tests/python/bnb_peer.py) step by step; in MixedPrecisionOptimizer, training a tiny model as the
// float32 moments do in a quarter of their memory; its errors; and on a GPU, the kernel against the
// ATen reference, with the moments on the device and paged into pinned host memory.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include "llmtrain/nn/gpt2.h"
#include "llmtrain/ops/adamw.h"
#include "llmtrain/ops/blockwise.h"
#include "llmtrain/optim/optimizer.h"
#include "test_util.h"

namespace {

namespace ops = llmtrain::ops;
using llmtrain::testing::bytes_file;
using llmtrain::testing::floats_file;
using llmtrain::testing::write_floats;

// One state per tensor as MixedPrecisionOptimizer makes them: 8-bit from 4096 elements.
struct Moments {
  std::vector<torch::Tensor> m, v;
  Moments(const std::vector<torch::Tensor>& masters, const torch::TensorOptions& where) {
    for (const auto& w : masters) {
      const bool eight = w.numel() >= 4096;
      for (auto* s : {&m, &v})
        s->push_back(eight ? ops::adamw8bit_state(w.numel(), where)
                           : torch::zeros(w.sizes(), where.dtype(torch::kFloat)));
    }
  }
};

ops::AdamWHyper hyper(int64_t step) {
  ops::AdamWHyper h;
  h.lr = 1e-3;
  h.beta1 = 0.9;
  h.beta2 = 0.95;
  h.eps = 1e-8;
  h.step = step;
  return h;
}

// The codes of a block-quantized moment (the bytes after its absmaxes) and the absmaxes.
torch::Tensor codes(const torch::Tensor& state, int64_t n) { return state.narrow(0, state.numel() - n, n); }
torch::Tensor absmaxes(const torch::Tensor& state, int64_t n) {
  return state.narrow(0, 0, 4 * ((n + 255) / 256)).view(torch::kFloat);
}

// Gradients with blocks of very different scales, and an all-zero block.
torch::Tensor gradient(int64_t n, int step) {
  auto g = torch::randn({n}) * torch::exp(torch::randn({(n + 255) / 256}) * 2).repeat_interleave(256).narrow(0, 0, n);
  if (n > 1024) g.narrow(0, 512, 256).zero_();
  return g * (1.0 / step);
}

// Each step from bitsandbytes' own parameters and moments after the step before: the same parameters
// (the update uses the moments before they are quantized again) and absmaxes, and the same codes but
// where bitsandbytes' search lands off the nearest level (its CPU and CUDA searches both can); there
// ours must be the nearer to the moment both quantized.
TEST(AdamW8bit, StepsAsBitsandbytes) {
  torch::manual_seed(0);
  llmtrain::testing::TempDir t;
  const std::vector<int64_t> sizes{5000, 19200, 300};  // a partial last block; whole blocks; float32 moments
  const int steps = 4;
  std::vector<torch::Tensor> start;
  std::string args;
  for (size_t i = 0; i < sizes.size(); ++i) {
    start.push_back(torch::randn({sizes[i]}) * 0.02);
    write_floats(t.path + "/p" + std::to_string(i) + ".bin", start[i]);
    args += " " + std::to_string(sizes[i]);
  }
  std::vector<std::vector<torch::Tensor>> grads(steps + 1);
  for (int s = 1; s <= steps; ++s)
    for (size_t i = 0; i < sizes.size(); ++i) {
      grads[s].push_back(gradient(sizes[i], s));
      write_floats(t.path + "/g" + std::to_string(s) + "_" + std::to_string(i) + ".bin", grads[s][i]);
    }
  ASSERT_EQ(
      llmtrain::testing::run_command("'" + llmtrain::testing::test_python() + "' '" +
                                     llmtrain::testing::test_source_dir() + "/tests/python/bnb_peer.py' adamw8bit '" +
                                     t.path + "' " + std::to_string(steps) + " 1e-3 0.1" + args + " > /dev/null 2>&1"),
      0);
  EXPECT_TRUE(torch::equal(ops::dynamic_map(false), floats_file(t.path + "/udynamic.bin", {256})));
  const std::vector<double> wd(sizes.size(), 0.1);
  const auto theirs = [&](int s, size_t i, const char* what) {
    return t.path + "/out" + std::to_string(s) + "_" + std::to_string(i) + what;
  };
  std::vector<torch::Tensor> masters = start;
  Moments st(masters, torch::TensorOptions());
  int64_t differ_total = 0, codes_total = 0;
  for (int s = 1; s <= steps; ++s) {
    SCOPED_TRACE(testing::Message() << "step " << s);
    for (size_t i = 0; i < sizes.size() && s > 1; ++i) {  // bitsandbytes' state after step s - 1
      const int64_t n = sizes[i];
      masters[i] = floats_file(t.path + "/out" + std::to_string(s - 1) + "_p" + std::to_string(i) + ".bin", {n});
      for (const bool second : {false, true}) {
        auto& ours = second ? st.v[i] : st.m[i];
        const std::string name = second ? "_v" : "_m";
        if (n < 4096) {
          ours = floats_file(theirs(s - 1, i, (name + ".bin").c_str()), {n});
          continue;
        }
        codes(ours, n).copy_(bytes_file(theirs(s - 1, i, (name + "codes.bin").c_str())));
        absmaxes(ours, n).copy_(floats_file(theirs(s - 1, i, (name + "absmax.bin").c_str()), {(n + 255) / 256}));
      }
    }
    std::vector<torch::Tensor> before_m, before_v;  // the moments the step starts from
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i];
      before_m.push_back(n < 4096 ? st.m[i].clone() : ops::adamw8bit_moment(st.m[i], n, false));
      before_v.push_back(n < 4096 ? st.v[i].clone() : ops::adamw8bit_moment(st.v[i], n, true));
    }
    ops::adamw_step(masters, grads[s], st.m, st.v, {}, wd, hyper(s), ops::grad_norm_scale(grads[s], 1.0, 0.0));
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i];
      const auto want = floats_file(t.path + "/out" + std::to_string(s) + "_p" + std::to_string(i) + ".bin", {n});
      EXPECT_LE(llmtrain::testing::max_abs_diff(masters[i], want), 1e-8) << "tensor " << i;
      if (n < 4096) continue;
      for (const bool second : {false, true}) {
        const std::string stem = theirs(s, i, second ? "_v" : "_m");
        const auto& ours = second ? st.v[i] : st.m[i];
        const auto their_codes = bytes_file(stem + "codes.bin");
        EXPECT_TRUE(torch::equal(absmaxes(ours, n), floats_file(stem + "absmax.bin", {(n + 255) / 256})))
            << "tensor " << i;
        const auto differ = codes(ours, n).ne(their_codes);
        differ_total += differ.sum().item<int64_t>();
        codes_total += n;
        // The moment both quantized, from the one the step started with.
        const auto g = grads[s][i];
        const auto exact = second ? before_v[i] * 0.95f + 0.05f * g * g : before_m[i] * 0.9f + 0.1f * g;
        const auto scale = absmaxes(ours, n).repeat_interleave(256).narrow(0, 0, n);
        const auto& map = ops::dynamic_map(!second);
        const auto mine = map.index_select(0, codes(ours, n).to(torch::kLong)) * scale,
                   other = map.index_select(0, their_codes.to(torch::kLong)) * scale;
        EXPECT_TRUE(((mine - exact).abs() <= (other - exact).abs() + 1e-6 * scale).all().item<bool>())
            << "tensor " << i << (second ? " v" : " m");
      }
    }
  }
  EXPECT_LE(differ_total, codes_total / 25) << "codes that differ";
}

TEST(AdamW8bit, OptimizerTrainsATinyModelAsFloat32MomentsDo) {
  std::vector<double> losses[2];
  for (const bool eight : {false, true}) {
    torch::manual_seed(3);
    const auto cfg = llmtrain::nn::GPT2Config::preset("tiny");
    llmtrain::nn::GPT2 model(cfg);
    llmtrain::optim::OptimizerOptions o;
    o.schedule.lr = 3e-3;
    o.state = eight ? llmtrain::optim::StateFormat::k8Bit : llmtrain::optim::StateFormat::kFP32;
    o.min_8bit_size = 1024;
    llmtrain::optim::MixedPrecisionOptimizer opt(*model, o);
    const auto idx = torch::randint(cfg.vocab_size(), {2, 32}, torch::kLong);
    for (int step = 0; step < 40; ++step) {
      const auto loss = model(idx, idx).loss;
      loss.backward();
      opt.step(step);
      losses[eight].push_back(loss.item<double>());
    }
    int64_t state_bytes = 0, eight_bit = 0, params = 0;
    for (const auto& [key, s] : opt.adamw().state()) {
      const auto& a = static_cast<torch::optim::AdamWParamState&>(*s);
      state_bytes += a.exp_avg().nbytes() + a.exp_avg_sq().nbytes();
      eight_bit += a.exp_avg().scalar_type() == torch::kByte;
    }
    for (const auto& p : model->parameters()) params += p.numel();
    if (eight) {
      EXPECT_GT(eight_bit, 0);
      EXPECT_LT(state_bytes, params * 2 * 4 * 0.3) << "8-bit moments: about a quarter of float32's";
    }
  }
  EXPECT_LT(losses[1].back(), losses[1].front() - 3.0);
  for (size_t s = 0; s < losses[0].size(); ++s)
    EXPECT_NEAR(losses[1][s], losses[0][s], 0.05 + 0.02 * losses[0][s]) << s;
}

TEST(AdamW8bit, ErrorsNameTheState) {
  const std::vector<torch::Tensor> w{torch::zeros({5000})}, g{torch::ones({5000})};
  const auto ns = ops::grad_norm_scale(g, 1.0, 0.0);
  llmtrain::testing::expect_error(
      [&] { ops::adamw_step(w, g, {ops::adamw8bit_state(5000, {})}, {torch::zeros({5000})}, {}, {0.0}, hyper(1), ns); },
      {"adamw_step: exp_avg_sqs[0] must be an 8-bit moment of 5080 bytes for 5000 elements (exp_avgs[0] is uint8), "
       "got Float [5000]"});
  llmtrain::testing::expect_error(
      [&] {
        ops::adamw_step(w, g, {ops::adamw8bit_state(4999, {})}, {ops::adamw8bit_state(4999, {})}, {}, {0.0}, hyper(1),
                        ns);
      },
      {"adamw_step: exp_avgs[0] must be an 8-bit moment of 5080 bytes for 5000 elements", "got Byte [5079]"});
  torch::nn::Linear layer(80, 80);
  llmtrain::optim::OptimizerOptions o;
  o.min_8bit_size = 0;
  llmtrain::testing::expect_error([&] { llmtrain::optim::MixedPrecisionOptimizer(*layer, o); },
                                  {"optimizer: min_8bit_size must be positive, got 0"});
}

// The kernel against the ATen reference, one step at a time from the same state (a moment near a level's
// edge may round the other way on the device, and 8-bit state carries such a difference on): the same
// parameters, bf16 copies and absmaxes within float32's rounding, codes equal or one level apart at a
// few elements. Moments paged into pinned host memory update bit for bit as device ones, step after
// step, and an inf gradient leaves everything as it was.
TEST(AdamW8bit, KernelMatchesTheReference_CUDA) {
  LLMTRAIN_SKIP_WITHOUT_CUDA();
  torch::manual_seed(5);
  const std::vector<int64_t> sizes{5000, 65536 + 300, 300, 256 * 9};
  std::vector<torch::Tensor> gpu, paged, bf16_gpu;
  for (const int64_t n : sizes) {
    gpu.push_back((torch::randn({n}) * 0.02).cuda());
    paged.push_back(gpu.back().clone());
    bf16_gpu.push_back(gpu.back().to(torch::kBFloat16));
  }
  Moments gpu_st(gpu, torch::TensorOptions().device(torch::kCUDA)),
      paged_st(paged, torch::TensorOptions().pinned_memory(true));
  const std::vector<double> wd{0.1, 0.1, 0.0, 0.1};
  const auto cpu = [](const std::vector<torch::Tensor>& v) {
    std::vector<torch::Tensor> out;
    for (const auto& t : v) out.push_back(t.cpu().clone());
    return out;
  };
  for (int s = 1; s <= 4; ++s) {
    SCOPED_TRACE(testing::Message() << "step " << s);
    std::vector<torch::Tensor> g, g_gpu;
    for (const int64_t n : sizes) {
      g.push_back(gradient(n, s).to(torch::kBFloat16));
      g_gpu.push_back(g.back().cuda());
    }
    auto ref = cpu(gpu), ref_m = cpu(gpu_st.m), ref_v = cpu(gpu_st.v), bf16_ref = cpu(bf16_gpu);
    auto h = hyper(s);
    h.stochastic_rounding = true;
    h.round_seed = 11;
    // No clipping: the factor is exactly 1 on both sides (a norm summed in another order would differ).
    ops::adamw_step(ref, g, ref_m, ref_v, bf16_ref, wd, h, ops::grad_norm_scale(g, 1.0, 0.0));
    ops::adamw_step(gpu, g_gpu, gpu_st.m, gpu_st.v, bf16_gpu, wd, h, ops::grad_norm_scale(g_gpu, 1.0, 0.0));
    ops::adamw_step(paged, g_gpu, paged_st.m, paged_st.v, {}, wd, h, ops::grad_norm_scale(g_gpu, 1.0, 0.0));
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t n = sizes[i];
      EXPECT_TRUE(torch::equal(gpu[i], paged[i])) << "paged moments update as device ones, tensor " << i;
      EXPECT_LE(llmtrain::testing::max_abs_diff(gpu[i].cpu(), ref[i]), 1e-7) << "tensor " << i;
      // The copies: the same bits but where the master differs in its last place.
      EXPECT_LE(bf16_gpu[i].cpu().ne(bf16_ref[i]).sum().item<int64_t>(), n / 1000 + 1) << "tensor " << i;
      if (n < 4096) {
        EXPECT_LE(llmtrain::testing::max_abs_diff(gpu_st.v[i].cpu(), ref_v[i]),
                  1e-6 * ref_v[i].abs().max().item<double>())
            << "tensor " << i;
        continue;
      }
      for (const bool second : {false, true}) {
        const auto a = (second ? gpu_st.v[i] : gpu_st.m[i]).cpu(), b = second ? ref_v[i] : ref_m[i];
        EXPECT_TRUE(torch::equal(a, second ? paged_st.v[i] : paged_st.m[i])) << "tensor " << i;
        EXPECT_LE(llmtrain::testing::max_abs_diff(absmaxes(a, n), absmaxes(b, n)),
                  1e-6 * absmaxes(b, n).abs().max().item<double>())
            << "tensor " << i;
        const auto gap = (codes(a, n).to(torch::kInt) - codes(b, n).to(torch::kInt)).abs();
        EXPECT_LE(gap.max().item<int>(), 1) << "tensor " << i;
        EXPECT_LE(gap.ne(0).sum().item<int64_t>(), n / 200) << "tensor " << i;
      }
    }
  }
  // An inf in a gradient: nothing changes, on the device or paged.
  const auto before = paged[0].clone(), state_before = paged_st.m[0].clone();
  std::vector<torch::Tensor> g;
  for (const int64_t n : sizes) g.push_back(torch::full({n}, INFINITY, torch::kCUDA));
  ops::adamw_step(paged, g, paged_st.m, paged_st.v, {}, wd, hyper(5), ops::grad_norm_scale(g, 1.0, 1.0));
  torch::cuda::synchronize();
  EXPECT_TRUE(torch::equal(paged[0], before));
  EXPECT_TRUE(torch::equal(paged_st.m[0], state_before));
}

}  // namespace
