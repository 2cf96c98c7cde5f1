// Matrix products through cuBLASLt with the epilogues that fold a layer's neighbouring work into the
// product: the bias add, GELU (writing its input too, for backward), GELU's gradient together with the
// bias gradient of the layer before it, and a weight product's bias gradient. None of them then costs a
// pass of its own over the activations. Terms are cuBLAS's column-major ones: a row-major
// (r, c) tensor is a column-major c x r matrix with leading dimension c.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "common/dtype.h"

namespace llmtrain::kernels {

enum class Epilogue {
  kNone,         // D = op(A) op(B)
  kBias,         // D = op(A) op(B) + bias (bias: m, added to every column)
  kGeluAuxBias,  // aux = op(A) op(B) + bias; D = gelu(aux), tanh approximation
  kDGeluBGrad,   // D = op(A) op(B) * gelu'(aux); bias = the sum of D's n columns (m)
  kBGradB,       // D = op(A) op(B); bias = the sums of op(B) over k (n): the bias gradient of dW = dY^T X
};

/// One product D (m x n) = op(A) (m x k) op(B) (k x n) and its epilogue. Every pointer must be 16-byte
/// aligned; a, b, d, bias and aux all have `dtype`; float32 math throughout (no TF32). With a_fp8 and
/// b_fp8 set, A and B are fp8 codes instead (not both e5m2; trans_a and not trans_b, as Hopper's fp8
/// products read both along k; m, k, lda, ldb multiples of 16) and D = a_scale * b_scale * op(A) op(B).
struct MatmulArgs {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;  // A stored k x m (trans_a) or m x k; B stored n x k or k x n
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;  // m x n, leading dimension ldd
  int64_t ldd = 0;
  DType dtype = DType::kBFloat16;
  Epilogue epilogue = Epilogue::kNone;
  void* bias = nullptr;  // read by kBias and kGeluAuxBias, written by kDGeluBGrad and kBGradB
  void* aux = nullptr;   // m x n, leading dimension m: written by kGeluAuxBias, read by kDGeluBGrad
  Fp8Format a_fp8 = Fp8Format::kNone, b_fp8 = Fp8Format::kNone;
  const float* a_scale = nullptr;  // fp8: device scalars, the codes' inverse scales, 256-byte aligned
  const float* b_scale = nullptr;
  bool fast_accum = false;  // fp8: Hopper's faster accumulation, fewer promotions to float32 (forward products)
};

/// Queues the product on `stream`. CUBLAS_STATUS_NOT_SUPPORTED when cuBLASLt has no algorithm for it.
/// Descriptors and the algorithm are chosen once per shape and kept: the first call times the
/// heuristic's candidates on its own operands (waiting for the stream) and keeps the fastest.
cublasStatus_t launch_matmul(cublasLtHandle_t handle, const MatmulArgs& args, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream);

}  // namespace llmtrain::kernels
