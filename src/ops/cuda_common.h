// What the CUDA paths of the ops share (src/ops/*_cuda.cpp, built with LLMTRAIN_CUDA): the record of bad
// ids, the kernels' dtypes, packed tensors and cuBLASLt's products. Each op has its own glue header
// (<op>_cuda.h): where ATen tensors meet the launchers of kernels/. An op's public function calls its
// CUDA path for CUDA tensors the path supports and its ATen reference otherwise.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "kernels/common/dtype.h"
#include "kernels/embedding.cuh"
#include "kernels/matmul.cuh"

namespace llmtrain::ops::cuda {

/// Where the CUDA checks of ops::IdCheck record the first bad id: a kernels::BadId in device memory, its
/// copy in pinned host memory queued after each check, and an event that marks when the copy is done.
class BadIdRecord {
 public:
  explicit BadIdRecord(const at::Device& device);
  ~BadIdRecord();
  kernels::BadId* device_record();
  /// Call after queueing a check on the current stream: queues the copy back and marks it. While the
  /// stream is being captured into a CUDA graph, take() queues the copy instead, each time it is called.
  void queued();
  /// The bad id found by the checks queued so far, if any (then the record starts afresh). `wait`: wait
  /// for them; otherwise only report checks that have finished. Nothing while the stream is captured.
  std::optional<kernels::BadId> take(bool wait);
  const at::Device& device() const { return device_; }

 private:
  struct State;
  at::Device device_;
  std::unique_ptr<State> s_;
};

/// True when `p` is aligned to `bytes` (the kernels' vector loads and stores want 8 or 16).
inline bool aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

/// The kernels' name for t's dtype; throws llmtrain::Error naming `what` for dtypes without a kernel.
kernels::DType kernel_dtype(const at::Tensor& t, const char* what);

/// t, contiguous and 16-byte aligned (copied when it is not), as the kernels' packed loads want it.
at::Tensor packed(const at::Tensor& t);

/// Queues `args` on cuBLASLt (kernels/matmul.cuh) with ATen's handle, workspace and current stream;
/// false when cuBLASLt has no algorithm for it; other failures throw.
bool lt_launch(const kernels::MatmulArgs& args);

/// Queues D = op(A) op(B) and its epilogue on cuBLASLt (kernels/matmul.cuh; linear_cuda.cpp has the
/// row-major layout) with ATen's handle, workspace and current stream; a, b, d contiguous and 16-byte
/// aligned (packed()). False when cuBLASLt has no algorithm for it; other failures throw.
bool lt_matmul(int64_t m, int64_t n, int64_t k, const at::Tensor& a, int64_t lda, bool trans_a, const at::Tensor& b,
               int64_t ldb, bool trans_b, at::Tensor& d, kernels::Epilogue epilogue = kernels::Epilogue::kNone,
               const at::Tensor& bias = {}, const at::Tensor& aux = {});

}  // namespace llmtrain::ops::cuda
