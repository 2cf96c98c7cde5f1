// Return-code checks for CUDA runtime, cuBLAS and NCCL calls. The header needs no CUDA headers (codes travel
// as int), so public headers may use the macros; the messages come from src/core/cuda_check.cpp,
// which is built when llmtrain is built with CUDA (LLMTRAIN_CUDA).
#pragma once

namespace llmtrain::detail {

[[noreturn]] void throw_cuda_error(int code, const char* expr, const char* file, int line);
[[noreturn]] void throw_nccl_error(int code, const char* expr, const char* file, int line);
[[noreturn]] void throw_cublas_error(int code, const char* expr, const char* file, int line);

inline void check_cuda(int code, const char* expr, const char* file, int line) {
  if (code != 0) throw_cuda_error(code, expr, file, line);  // 0 == cudaSuccess
}
inline void check_nccl(int code, const char* expr, const char* file, int line) {
  if (code != 0) throw_nccl_error(code, expr, file, line);  // 0 == ncclSuccess
}
inline void check_cublas(int code, const char* expr, const char* file, int line) {
  if (code != 0) throw_cublas_error(code, expr, file, line);  // 0 == CUBLAS_STATUS_SUCCESS
}

}  // namespace llmtrain::detail

/// Throws llmtrain::Error naming the CUDA error, the call and the place:
///   LLMTRAIN_CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, stream));
#define LLMTRAIN_CUDA_CHECK(expr) ::llmtrain::detail::check_cuda(static_cast<int>(expr), #expr, __FILE__, __LINE__)

/// Throws llmtrain::Error naming the cuBLAS status, the call and the place:
///   LLMTRAIN_CUBLAS_CHECK(kernels::launch_matmul(handle, args, ws, ws_bytes, stream));
#define LLMTRAIN_CUBLAS_CHECK(expr) ::llmtrain::detail::check_cublas(static_cast<int>(expr), #expr, __FILE__, __LINE__)

/// Throws llmtrain::Error naming the NCCL error, the call and the place:
///   LLMTRAIN_NCCL_CHECK(ncclAllReduce(buf, buf, n, ncclFloat, ncclSum, comm, stream));
#define LLMTRAIN_NCCL_CHECK(expr) ::llmtrain::detail::check_nccl(static_cast<int>(expr), #expr, __FILE__, __LINE__)
