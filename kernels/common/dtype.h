// The element types launchers take. Host-only code (src/ops/*_cuda.cpp) includes this through the
// launcher headers; device helpers live in common.cuh, which only .cu files include.
#pragma once

namespace llmtrain::kernels {

/// The element type of a tensor a launcher reads or writes.
enum class DType { kFloat32, kBFloat16, kFloat16 };

/// The two fp8 formats of the products (kNone: an operand in the product's DType): e4m3 (fn: no
/// infinities, largest 448) for inputs and weights, e5m2 (largest 57344) for gradients.
enum class Fp8Format { kNone, kE4M3, kE5M2 };

/// Bytes of one element, and the elements of a 16-byte pack (the kernels' vector loads and stores).
constexpr int dtype_bytes(DType dtype) { return dtype == DType::kFloat32 ? 4 : 2; }
constexpr int pack_elements(DType dtype) { return 16 / dtype_bytes(dtype); }

}  // namespace llmtrain::kernels
