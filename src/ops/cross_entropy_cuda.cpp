// The fused classifier's glue: argument checks, the current stream, dtype dispatch, and an autograd
// function whose forward keeps only the row log-sum-exps (N floats) besides the logits themselves.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <torch/autograd.h>

#include "cross_entropy_cuda.h"
#include "kernels/cross_entropy.cuh"
#include "llmtrain/core/cuda_check.h"
#include "llmtrain/core/error.h"

namespace llmtrain::ops::cuda {
namespace {

struct CrossEntropyFn : torch::autograd::Function<CrossEntropyFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& logits,  // (N, cols)
                            const at::Tensor& targets,                                        // (N) int64
                            int64_t ignore_index, int64_t num_classes, bool overwrite) {
    const int64_t N = logits.size(0);
    const auto f32 = logits.options().dtype(at::kFloat);
    at::Tensor loss = at::empty({N}, f32), lse = at::empty({N}, f32);  // (N) each
    const at::Tensor t = targets.contiguous();
    LLMTRAIN_CUDA_CHECK(kernels::launch_cross_entropy_fwd(
        logits.data_ptr(), kernel_dtype(logits, "cross_entropy: logits"), N, num_classes, logits.size(1),
        logits.stride(0), t.data_ptr<int64_t>(), ignore_index, loss.data_ptr<float>(), lse.data_ptr<float>(),
        at::cuda::getCurrentCUDAStream()));
    const at::Tensor count = t.ne(ignore_index).sum().to(at::kFloat);  // stays on the device: no sync
    ctx->save_for_backward({logits, t, lse, count});
    ctx->saved_data["ignore_index"] = ignore_index;
    ctx->saved_data["num_classes"] = num_classes;
    ctx->saved_data["overwrite"] = overwrite && logits.is_contiguous();  // the gradient's rows are contiguous
    return loss.sum() / count;  // all targets ignored: 0 / 0 = NaN, as PyTorch gives
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &logits = saved[0], &t = saved[1], &lse = saved[2], &count = saved[3];
    const at::Tensor scale = (grads[0].to(at::kFloat) / count).contiguous();  // (1) on the device
    const bool overwrite = ctx->saved_data["overwrite"].toBool();
    if (overwrite) {
      LLMTRAIN_CHECK(!ctx->saved_data.count("spent"),
                     "cross_entropy: backward ran twice through logits that the first "
                     "backward overwrote with their gradient (overwrite_logits)");
      ctx->saved_data["spent"] = true;
    }
    at::Tensor dlogits = overwrite ? logits : at::empty(logits.sizes(), logits.options());  // (N, cols) contiguous
    LLMTRAIN_CUDA_CHECK(kernels::launch_cross_entropy_bwd(
        logits.data_ptr(), kernel_dtype(logits, "cross_entropy: logits"), logits.size(0),
        ctx->saved_data["num_classes"].toInt(), logits.size(1), logits.stride(0), t.data_ptr<int64_t>(),
        ctx->saved_data["ignore_index"].toInt(), lse.data_ptr<float>(), scale.data_ptr<float>(), dlogits.data_ptr(),
        at::cuda::getCurrentCUDAStream()));
    return {dlogits, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool cross_entropy_supported(const at::Tensor& logits) {
  const auto s = logits.scalar_type();
  return logits.is_cuda() && (s == at::kFloat || s == at::kBFloat16 || s == at::kHalf) &&
         (logits.size(1) <= 1 || logits.stride(1) == 1) && logits.stride(0) >= logits.size(1);
}

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index, int64_t num_classes,
                         bool overwrite_logits) {
  LLMTRAIN_CHECK(targets.device() == logits.device(), "cross_entropy: targets are on ", targets.device(),
                 ", logits on ", logits.device());
  return CrossEntropyFn::apply(logits, targets, ignore_index, num_classes, overwrite_logits);
}

at::Tensor cross_entropy_rows(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                              int64_t num_classes, const at::Tensor& scale) {
  const int64_t N = logits.size(0), cols = logits.size(1);
  const auto f32 = logits.options().dtype(at::kFloat);
  at::Tensor loss = at::empty({N}, f32), lse = at::empty({N}, f32);
  const at::Tensor t = targets.contiguous();
  const auto dtype = kernel_dtype(logits, "linear_cross_entropy: h");
  const auto stream = at::cuda::getCurrentCUDAStream();
  LLMTRAIN_CUDA_CHECK(kernels::launch_cross_entropy_fwd(logits.data_ptr(), dtype, N, num_classes, cols, cols,
                                                        t.data_ptr<int64_t>(), ignore_index, loss.data_ptr<float>(),
                                                        lse.data_ptr<float>(), stream));
  if (!scale.defined()) return loss;
  LLMTRAIN_CUDA_CHECK(kernels::launch_cross_entropy_bwd(logits.data_ptr(), dtype, N, num_classes, cols, cols,
                                                        t.data_ptr<int64_t>(), ignore_index, lse.data_ptr<float>(),
                                                        scale.data_ptr<float>(), logits.data_ptr(), stream));
  return loss;
}

}  // namespace llmtrain::ops::cuda
