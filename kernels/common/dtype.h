// The element types launchers take. Host-only code (src/ops/*_cuda.cpp) includes this through the
// launcher headers; device helpers live in common.cuh, which only .cu files include.
#pragma once

namespace llmtrain::kernels {

/// The element type of a tensor a launcher reads or writes.
enum class DType { kFloat32, kBFloat16, kFloat16 };

}  // namespace llmtrain::kernels
