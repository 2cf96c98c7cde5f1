// The element types launchers take. Host-only code (src/ops/*_cuda.cpp) includes this through the
// launcher headers; device helpers live in common.cuh, which only .cu files include.
#pragma once

namespace llmtrain::kernels {

/// The element type of a tensor a launcher reads or writes.
enum class DType { kFloat32, kBFloat16, kFloat16 };

/// Bytes of one element, and the elements of a 16-byte pack (the kernels' vector loads and stores).
constexpr int dtype_bytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }
constexpr int pack_elements(DType dtype) { return 16 / dtype_bytes(dtype); }

}  // namespace llmtrain::kernels
