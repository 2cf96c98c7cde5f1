#include "llmtrain/ops/dispatch.h"

#include <array>
#include <atomic>

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"

namespace llmtrain::ops {
namespace {

constexpr std::array<const char*, 9> kNames = {"embedding", "layer_norm", "gelu",  "linear",           "mlp",
                                               "gemv",      "cross_entropy", "adamw", "decode_attention"};
std::atomic<bool> g_enabled{LLMTRAIN_WITH_CUDA != 0};
// The MLP's cuBLASLt epilogues start off: on the H200 the fused MLP took 1.02 ms against ATen's
// 0.87 (products + GELU kernel) for GPT-2 124M's layer, forward and backward (benchmarks/README.md).
std::array<std::atomic<bool>, kNames.size()> g_op_enabled{true, true, true, true, false, true, true, true, true};

size_t index_of(const std::string& op) {
  for (size_t i = 0; i < kNames.size(); ++i)
    if (op == kNames[i]) return i;
  std::string names;
  for (const char* n : kNames) names += (names.empty() ? "" : ", ") + std::string(n);
  LLMTRAIN_CHECK(false, "no CUDA kernel for op \"", op, "\"; ops with one: ", names);
  return 0;
}

}  // namespace

void set_cuda_kernels_enabled(bool enabled) { g_enabled = enabled && LLMTRAIN_WITH_CUDA != 0; }
bool cuda_kernels_enabled() { return g_enabled; }

void set_cuda_kernel_enabled(const std::string& op, bool enabled) { g_op_enabled[index_of(op)] = enabled; }
bool cuda_kernel_enabled(const std::string& op) { return g_enabled && g_op_enabled[index_of(op)]; }

std::vector<std::string> cuda_kernel_names() { return {kNames.begin(), kNames.end()}; }

}  // namespace llmtrain::ops
