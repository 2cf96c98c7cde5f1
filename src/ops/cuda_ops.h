// The CUDA paths of the ops (src/ops/*_cuda.cpp, built with LLMTRAIN_CUDA): where ATen tensors meet
// the launchers of kernels/. Each op's public function calls its CUDA path for CUDA tensors the path
// supports and its ATen reference otherwise.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "../../kernels/common/dtype.h"
#include "../../kernels/embedding.cuh"
#include "../../kernels/matmul.cuh"
#include "llmtrain/ops/adamw.h"

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

/// The kernels' name for t's dtype; throws llmtrain::Error naming `what` for dtypes without a kernel.
kernels::DType kernel_dtype(const at::Tensor& t, const char* what);

/// t, contiguous and 16-byte aligned (copied when it is not), as the kernels' packed loads want it.
at::Tensor packed(const at::Tensor& t);

/// True when the fused classifier takes these logits: a CUDA tensor of float32, bfloat16 or float16
/// with unit column stride.
bool cross_entropy_supported(const at::Tensor& logits);
/// ops::cross_entropy on the fused classifier (an autograd function).
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                         int64_t num_classes, bool overwrite_logits);

/// True when the layer norm kernels take these: CUDA tensors, x of float32/bf16/fp16 with a row width
/// kernels::layer_norm_fits, weight and bias contiguous of x's dtype or float32.
bool layer_norm_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
/// ops::add_layer_norm on the kernels (an autograd function); delta may be undefined (then only
/// layer_norm(x) is computed and returned, as .second). x and delta share one dtype.
std::pair<at::Tensor, at::Tensor> add_layer_norm(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& weight,
                                                 const at::Tensor& bias, double eps);

/// True when the GELU kernels take x: a CUDA tensor of float32, bf16 or fp16.
bool gelu_supported(const at::Tensor& x);
/// ops::gelu on the kernels (an autograd function).
at::Tensor gelu(const at::Tensor& x);

/// Queues D = op(A) op(B) and its epilogue on cuBLASLt (kernels/matmul.cuh; linear_cuda.cpp has the
/// row-major layout) with ATen's handle, workspace and current stream; a, b, d contiguous and 16-byte
/// aligned (packed()). False when cuBLASLt has no algorithm for it; other failures throw.
bool lt_matmul(int64_t m, int64_t n, int64_t k, const at::Tensor& a, int64_t lda, bool trans_a, const at::Tensor& b,
               int64_t ldb, bool trans_b, at::Tensor& d, kernels::Epilogue epilogue = kernels::Epilogue::kNone,
               const at::Tensor& bias = {}, const at::Tensor& aux = {});
/// y (..., out) = x W^T + b for packed x (..., in), W (out, in), b (out), with `epilogue` kBias or
/// kGeluAuxBias (then y = gelu of it, the pre-activation into aux); false when cuBLASLt has no algorithm.
bool forward_product(const at::Tensor& x, const at::Tensor& w, const at::Tensor& b, kernels::Epilogue epilogue,
                     at::Tensor& y, const at::Tensor& aux = {});
/// dw (out, in) = dy^T x for packed x (N, in) and dy (N, out); with db, dy's column sums too (out), in
/// the product's epilogue where cuBLASLt has one for the shape.
void linear_weight_grads(const at::Tensor& x, const at::Tensor& dy, at::Tensor& dw, at::Tensor* db);

/// y = gelu(x W^T + b) without a gradient, the GELU in cuBLASLt's epilogue (its pre-activation in a
/// scratch tensor); false when cuBLASLt has no algorithm.
bool linear_gelu_forward(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias, at::Tensor& y);

/// y (..., N) = act(in W^T + b) on the few-row kernel (kernels/gemv.cuh), in = x or, given ln_weight
/// and ln_bias, layer_norm(x + delta) (delta and bias may be undefined); sum = x + delta (x itself
/// without delta). False, launching nothing, when the kernel does not take them: more than
/// kernels::kGemvMaxRows rows, a row width it cannot fit, tensors not all CUDA of one dtype.
bool gemv(const at::Tensor& x, const at::Tensor& delta, const at::Tensor& ln_weight, const at::Tensor& ln_bias,
          double eps, const at::Tensor& weight, const at::Tensor& bias, bool gelu, at::Tensor& sum, at::Tensor& y);

/// True when the cuBLASLt products take this layer: CUDA tensors of one dtype (float32, bf16, fp16),
/// the weight's both sizes multiples of 8. Both ops::linear's and ops::mlp's layers.
bool linear_supported(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
/// ops::linear with a bias (an autograd function).
at::Tensor linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias);
/// ops::mlp on cuBLASLt with fused epilogues (an autograd function).
at::Tensor mlp(const at::Tensor& x, const at::Tensor& fc_weight, const at::Tensor& fc_bias,
               const at::Tensor& proj_weight, const at::Tensor& proj_bias);

/// True when the embedding kernels take these: CUDA tensors, wte and wpe of one dtype (float32, bf16,
/// fp16), idx int64.
bool embedding_supported(const at::Tensor& idx, const at::Tensor& wte, const at::Tensor& wpe);
/// ops::embedding on the kernels (an autograd function; no backward with `start`); bad ids go into
/// `record` with `tag`.
at::Tensor embedding(const at::Tensor& idx, const at::Tensor& wte, const at::Tensor& wpe, const at::Tensor& start,
                     int64_t num_ids, BadIdRecord& record, int64_t tag);
/// The device side of ops::IdCheck for CUDA ids: queues the check of `ids` into `record`.
void check_ids(const at::Tensor& ids, int64_t num_ids, std::optional<int64_t> ignore_index, BadIdRecord& record,
               int64_t tag);

/// True when the decode-attention kernel takes these: CUDA tensors of float32, bf16 or fp16, contiguous
/// caches with heads the kernel fits (kernels::decode_attention_fits), qkv rows 16-byte aligned.
bool decode_attention_supported(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache);
/// ops::decode_attention on the kernel (arguments already checked for shapes, dtypes and devices).
at::Tensor decode_attention(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& positions);

/// ops::grad_norm_scale and ops::adamw_step on the multi-tensor kernels (arguments already checked for
/// counts, shapes and devices; contiguity and dtypes are checked here).
at::Tensor grad_norm_scale(const std::vector<at::Tensor>& grads, double inv_scale, double max_norm);
void adamw_step(const std::vector<at::Tensor>& masters, const std::vector<at::Tensor>& grads,
                const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                const std::vector<at::Tensor>& params, const std::vector<double>& weight_decays,
                const AdamWHyper& hyper, const at::Tensor& norm_scale);

}  // namespace llmtrain::ops::cuda
