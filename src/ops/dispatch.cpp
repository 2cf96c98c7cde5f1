#include "llmtrain/ops/dispatch.h"

#include <atomic>

#include "llmtrain/config.h"

namespace llmtrain::ops {
namespace {
std::atomic<bool> g_enabled{LLMTRAIN_WITH_CUDA != 0};
}  // namespace

void set_cuda_kernels_enabled(bool enabled) { g_enabled = enabled && LLMTRAIN_WITH_CUDA != 0; }
bool cuda_kernels_enabled() { return g_enabled; }

}  // namespace llmtrain::ops
