#include "llmtrain/ops/dispatch.h"

#include <array>
#include <atomic>
#include <utility>

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"

namespace llmtrain::ops {
namespace {

// Every kernel switch: its op, its name, and whether it is on at start.
struct Switch {
  Kernel op;
  const char* name;
  bool on_at_start;
};
// The MLP's cuBLASLt epilogues start off: on the H200 the fused MLP took 1.02 ms against ATen's
// 0.87 (products + GELU kernel) for GPT-2 124M's layer, forward and backward (benchmarks/README.md).
// The Hopper attention kernels passed their tests (sessions 28 and 29) but take 0.89 ms for GPT-2 124M's
// layer forward and backward on an H100, where cuDNN's SDPA kernels take 0.37, so they start off too.
// Attention's fp8 forward is a choice of precision, off unless asked.
constexpr Switch kSwitches[] = {
    {Kernel::kEmbedding, "embedding", true},
    {Kernel::kLayerNorm, "layer_norm", true},
    {Kernel::kGelu, "gelu", true},
    {Kernel::kLinear, "linear", true},
    {Kernel::kMlp, "mlp", false},
    {Kernel::kGemv, "gemv", true},
    {Kernel::kCrossEntropy, "cross_entropy", true},
    {Kernel::kAdamW, "adamw", true},
    {Kernel::kDecodeAttention, "decode_attention", true},
    {Kernel::kRmsNorm, "rms_norm", true},
    {Kernel::kSwiGLU, "swiglu", true},
    {Kernel::kRotary, "rotary", true},
    {Kernel::kNF4, "nf4", true},
    {Kernel::kFp8, "fp8", true},
    {Kernel::kAttention, "attention", false},
    {Kernel::kAttentionFp8, "attention_fp8", false},
};
constexpr size_t kCount = sizeof kSwitches / sizeof kSwitches[0];
static_assert(
    [] {
      for (size_t i = 0; i < kCount; ++i)
        if (size_t(kSwitches[i].op) != i) return false;
      return true;
    }(),
    "kSwitches lists the kernels in Kernel's order");

std::atomic<bool> g_enabled{LLMTRAIN_WITH_CUDA != 0};
template <size_t... I>
constexpr std::array<std::atomic<bool>, kCount> switches_at_start(std::index_sequence<I...>) {
  return {kSwitches[I].on_at_start...};
}
// Constant-initialized: right before any other file's static initializers could ask.
std::array<std::atomic<bool>, kCount> g_op_enabled = switches_at_start(std::make_index_sequence<kCount>());

Kernel kernel_named(const std::string& op) {
  for (const Switch& s : kSwitches)
    if (op == s.name) return s.op;
  std::string names;
  for (const Switch& s : kSwitches) names += (names.empty() ? "" : ", ") + std::string(s.name);
  LLMTRAIN_CHECK(false, "no CUDA kernel for op \"", op, "\"; ops with one: ", names);
  return Kernel::kEmbedding;
}

}  // namespace

void set_cuda_kernels_enabled(bool enabled) { g_enabled = enabled && LLMTRAIN_WITH_CUDA != 0; }
bool cuda_kernels_enabled() { return g_enabled; }

void set_cuda_kernel_enabled(Kernel op, bool enabled) { g_op_enabled[size_t(op)] = enabled; }
bool cuda_kernel_enabled(Kernel op) { return g_enabled && g_op_enabled[size_t(op)]; }
void set_cuda_kernel_enabled(const std::string& op, bool enabled) {
  set_cuda_kernel_enabled(kernel_named(op), enabled);
}
bool cuda_kernel_enabled(const std::string& op) { return cuda_kernel_enabled(kernel_named(op)); }

std::vector<std::string> cuda_kernel_names() {
  std::vector<std::string> names;
  for (const Switch& s : kSwitches) names.push_back(s.name);
  return names;
}

}  // namespace llmtrain::ops
