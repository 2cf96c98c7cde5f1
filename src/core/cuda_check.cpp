// Messages for failed CUDA, cuBLAS and NCCL calls: the library's name for the code, its description, the
// call as written and where it was made, so a failure deep in a step says what broke.
#include "llmtrain/core/cuda_check.h"

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nccl.h>

#include "llmtrain/core/error.h"

namespace llmtrain::detail {

void throw_cuda_error(int code, const char* expr, const char* file, int line) {
  const auto err = static_cast<cudaError_t>(code);
  throw Error(str_cat("CUDA error ", cudaGetErrorName(err), " (", cudaGetErrorString(err), ") from `", expr, "` at ",
                      file, ":", line));
}

void throw_nccl_error(int code, const char* expr, const char* file, int line) {
  const auto res = static_cast<ncclResult_t>(code);
  throw Error(str_cat("NCCL error ", code, " (", ncclGetErrorString(res), ") from `", expr, "` at ", file, ":", line));
}

void throw_cublas_error(int code, const char* expr, const char* file, int line) {
  const auto status = static_cast<cublasStatus_t>(code);
  throw Error(str_cat("cuBLAS error ", cublasGetStatusName(status), " (", cublasGetStatusString(status), ") from `",
                      expr, "` at ", file, ":", line));
}

}  // namespace llmtrain::detail
