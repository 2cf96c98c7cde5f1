// A cache of cuBLASLt plans, one per (shape, layout, dtype, epilogue, pointer alignment, fp8 formats): the
// descriptors and the fastest of the heuristic's candidates, timed on first use (the heuristic's first
// choice was often slower than cuBLAS's own for these epilogues). The bias and aux pointers change
// from call to call, so they are set on the cached descriptor under a lock, right before the launch (and
// so are fp8's scale pointers).
#include <map>
#include <mutex>
#include <tuple>

#include "matmul.cuh"

namespace llmtrain::kernels {
namespace {

#define LLMTRAIN_RETURN_IF_ERROR(expr)                    \
  do {                                                    \
    const cublasStatus_t status_ = (expr);                \
    if (status_ != CUBLAS_STATUS_SUCCESS) return status_; \
  } while (0)

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::kFloat32: return CUDA_R_32F;
    case DType::kBFloat16: return CUDA_R_16BF;
    case DType::kFloat16: return CUDA_R_16F;
  }
  return CUDA_R_32F;
}

cudaDataType_t operand_type(Fp8Format f, DType t) {
  switch (f) {
    case Fp8Format::kE4M3: return CUDA_R_8F_E4M3;
    case Fp8Format::kE5M2: return CUDA_R_8F_E5M2;
    case Fp8Format::kNone: break;
  }
  return cuda_type(t);
}

bool is_fp8(const MatmulArgs& x) { return x.a_fp8 != Fp8Format::kNone || x.b_fp8 != Fp8Format::kNone; }

cublasLtEpilogue_t lt_epilogue(Epilogue e) {
  switch (e) {
    case Epilogue::kNone: return CUBLASLT_EPILOGUE_DEFAULT;
    case Epilogue::kBias: return CUBLASLT_EPILOGUE_BIAS;
    case Epilogue::kGeluAuxBias: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case Epilogue::kDGeluBGrad: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
    case Epilogue::kBGradB: return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

// 1 when p is 256-byte aligned (the heuristic may pick faster algorithms then), else 0.
int wide(const void* p) { return reinterpret_cast<uintptr_t>(p) % 256 == 0 ? 1 : 0; }

using Key = std::tuple<int64_t, int64_t, int64_t, bool, bool, int64_t, int64_t, int64_t, int, int, int, int, int, bool>;

// The fp8 codes' inverse scales: read by the product from device memory, set on every call.
cublasStatus_t set_scales(cublasLtMatmulDesc_t desc, const MatmulArgs& x) {
  LLMTRAIN_RETURN_IF_ERROR(
      cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &x.a_scale, sizeof x.a_scale));
  return cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x.b_scale, sizeof x.b_scale);
}

struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;  // of making the plan; not SUCCESS: no plan
};

cublasStatus_t make_plan(cublasLtHandle_t handle, const MatmulArgs& x, void* workspace, size_t workspace_bytes,
                         cudaStream_t stream, Plan& p) {
  const cudaDataType_t t = cuda_type(x.dtype);
  LLMTRAIN_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = x.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = x.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  LLMTRAIN_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta));
  LLMTRAIN_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb));
  const cublasLtEpilogue_t epi = lt_epilogue(x.epilogue);
  LLMTRAIN_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi));
  if (x.epilogue != Epilogue::kNone) {
    LLMTRAIN_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &t, sizeof t));
    LLMTRAIN_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x.bias, sizeof x.bias));
  }
  if (x.epilogue == Epilogue::kGeluAuxBias || x.epilogue == Epilogue::kDGeluBGrad) {
    const int64_t ld = x.m;
    LLMTRAIN_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof ld));
    LLMTRAIN_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x.aux, sizeof x.aux));
  }
  if (is_fp8(x)) {
    if (x.a_fp8 == Fp8Format::kNone || x.b_fp8 == Fp8Format::kNone || !x.trans_a || x.trans_b)
      return CUBLAS_STATUS_NOT_SUPPORTED;
    LLMTRAIN_RETURN_IF_ERROR(set_scales(p.desc, x));
    const int8_t fast = x.fast_accum ? 1 : 0;
    LLMTRAIN_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast));
  }
  const cudaDataType_t ta_type = operand_type(x.a_fp8, x.dtype), tb_type = operand_type(x.b_fp8, x.dtype);
  LLMTRAIN_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&p.a, ta_type, x.trans_a ? x.k : x.m, x.trans_a ? x.m : x.k, x.lda));
  LLMTRAIN_RETURN_IF_ERROR(
      cublasLtMatrixLayoutCreate(&p.b, tb_type, x.trans_b ? x.n : x.k, x.trans_b ? x.k : x.n, x.ldb));
  LLMTRAIN_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&p.d, t, x.m, x.n, x.ldd));
  cublasLtMatmulPreference_t pref = nullptr;
  LLMTRAIN_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
  cublasStatus_t status = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                               &workspace_bytes, sizeof workspace_bytes);
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t results[kCandidates] = {};
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLtMatmulAlgoGetHeuristic(handle, p.desc, p.a, p.b, p.d, p.d, pref, kCandidates, results, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  LLMTRAIN_RETURN_IF_ERROR(status);
  if (found == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  p.algo = results[0].algo;
  if (found == 1) return CUBLAS_STATUS_SUCCESS;
  // Time each candidate (one warm-up, then three runs) on the call's own operands: the outputs are
  // written again by the real launch that follows. Not while the stream is captured into a CUDA graph,
  // where waiting on an event would end the capture: the heuristic's first choice stays then.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &capture) != cudaSuccess || capture != cudaStreamCaptureStatusNone)
    return CUBLAS_STATUS_SUCCESS;
  cudaEvent_t start = nullptr, stop = nullptr;
  if (cudaEventCreate(&start) != cudaSuccess || cudaEventCreate(&stop) != cudaSuccess) return CUBLAS_STATUS_SUCCESS;
  const float alpha = 1.f, beta = 0.f;
  float best = -1.f;
  for (int i = 0; i < found; ++i) {
    if (results[i].state != CUBLAS_STATUS_SUCCESS) continue;
    bool ok = true;
    for (int r = 0; r < 4 && ok; ++r) {
      if (r == 1) cudaEventRecord(start, stream);
      ok = cublasLtMatmul(handle, p.desc, &alpha, x.a, p.a, x.b, p.b, &beta, x.d, p.d, x.d, p.d, &results[i].algo,
                          workspace, workspace_bytes, stream) == CUBLAS_STATUS_SUCCESS;
    }
    cudaEventRecord(stop, stream);
    float ms = 0.f;
    if (!ok || cudaEventSynchronize(stop) != cudaSuccess || cudaEventElapsedTime(&ms, start, stop) != cudaSuccess)
      continue;
    if (best < 0 || ms < best) {
      best = ms;
      p.algo = results[i].algo;
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return CUBLAS_STATUS_SUCCESS;
}

std::mutex g_mu;
std::map<std::pair<cublasLtHandle_t, Key>, Plan> g_plans;  // kept for the process's lifetime

}  // namespace

cublasStatus_t launch_matmul(cublasLtHandle_t handle, const MatmulArgs& x, void* workspace, size_t workspace_bytes,
                             cudaStream_t stream) {
  if (x.m == 0 || x.n == 0) return CUBLAS_STATUS_SUCCESS;
  // cuBLASLt offers no fp8 algorithm for a scale pointer 4 bytes past an aligned one (H100, cuBLASLt
  // 13.1): a misplaced scale is the caller's error, not a shape without an algorithm.
  if (is_fp8(x) && (!wide(x.a_scale) || !wide(x.b_scale))) return CUBLAS_STATUS_INVALID_VALUE;
  const Key key{x.m,
                x.n,
                x.k,
                x.trans_a,
                x.trans_b,
                x.lda,
                x.ldb,
                x.ldd,
                int(x.dtype),
                int(x.epilogue),
                wide(x.a) | wide(x.b) << 1 | wide(x.d) << 2 | wide(x.aux) << 3 | wide(workspace) << 4,
                int(x.a_fp8),
                int(x.b_fp8),
                x.fast_accum};
  const std::lock_guard<std::mutex> lock(g_mu);
  auto [it, fresh] = g_plans.try_emplace({handle, key});
  Plan& p = it->second;
  if (fresh) p.status = make_plan(handle, x, workspace, workspace_bytes, stream, p);
  if (p.status != CUBLAS_STATUS_SUCCESS) return p.status;
  if (x.epilogue != Epilogue::kNone)
    LLMTRAIN_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &x.bias, sizeof x.bias));
  if (x.epilogue == Epilogue::kGeluAuxBias || x.epilogue == Epilogue::kDGeluBGrad)
    LLMTRAIN_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &x.aux, sizeof x.aux));
  if (is_fp8(x)) LLMTRAIN_RETURN_IF_ERROR(set_scales(p.desc, x));
  const float alpha = 1.f, beta = 0.f;
  return cublasLtMatmul(handle, p.desc, &alpha, x.a, p.a, x.b, p.b, &beta, x.d, p.d, x.d, p.d, &p.algo, workspace,
                        workspace_bytes, stream);
}

}  // namespace llmtrain::kernels
