#include "llmtrain/ops/cross_entropy.h"

#include <ATen/ATen.h>
#include <torch/autograd.h>

#include <algorithm>

#include "autocast.h"
#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#if LLMTRAIN_WITH_CUDA
#include "cross_entropy_cuda.h"
#endif

namespace llmtrain::ops {
namespace {

void check_targets(const at::Tensor& logits_or_h, const at::Tensor& targets, const char* op) {
  LLMTRAIN_CHECK(targets.dim() == 1 && targets.size(0) == logits_or_h.size(0), op, ": targets must be (",
                 logits_or_h.size(0), ") to match ", logits_or_h.sizes(), ", got ", targets.sizes());
  LLMTRAIN_CHECK(targets.scalar_type() == at::kLong, op, ": targets must be int64, got ", targets.scalar_type());
}

// The fused classifier's pair as ATen computes it: each row's loss (0 for an ignored target), and with
// `scale` (a device scalar) the logits overwritten by their gradient times it.
at::Tensor reference_rows(const at::Tensor& logits, const at::Tensor& t, int64_t ignore_index, int64_t V,
                          const at::Tensor& scale) {
  const at::Tensor l = logits.narrow(1, 0, V).to(at::promote_types(logits.scalar_type(), at::kFloat));
  const at::Tensor keep = t.ne(ignore_index);
  const at::Tensor idx = t.masked_fill(~keep, 0).unsqueeze(1), lse = l.logsumexp(1, /*keepdim=*/true);
  const at::Tensor loss = (lse - l.gather(1, idx)).squeeze(1).masked_fill(~keep, 0);
  if (scale.defined()) {
    at::Tensor grad = (l - lse).exp_();
    grad.scatter_add_(1, idx, at::full({idx.size(0), 1}, -1.0, grad.options()));
    grad = at::where(keep.unsqueeze(1), grad * scale, at::zeros({}, grad.options()));
    logits.narrow(1, V, logits.size(1) - V).zero_();
    logits.narrow(1, 0, V).copy_(grad);
  }
  return loss;
}

struct LinearCrossEntropyFn : torch::autograd::Function<LinearCrossEntropyFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& h, const at::Tensor& weight,
                            const at::Tensor& targets, int64_t ignore_index, int64_t num_classes, int64_t rows) {
    const bool grad = h.requires_grad();
    const int64_t N = h.size(0);
    const at::Tensor t = targets.contiguous();
    const at::Tensor count =  // float32 (float64 for float64 h), on the device: no sync
        t.ne(ignore_index).sum().to(at::promote_types(h.scalar_type(), at::kFloat));
    const at::Tensor scale = grad ? (1 / count).reshape({1}) : at::Tensor();
    at::Tensor total = at::zeros({}, count.options()), dh = grad ? at::empty_like(h) : at::Tensor();
    for (int64_t r0 = 0; r0 < N; r0 += rows) {
      const int64_t n = std::min(rows, N - r0);
      const at::Tensor logits = at::mm(h.narrow(0, r0, n), weight.t()), tc = t.narrow(0, r0, n);
      at::Tensor loss;
#if LLMTRAIN_WITH_CUDA
      if (cuda_kernel_enabled(Kernel::kCrossEntropy) && cuda::cross_entropy_supported(logits))
        loss = cuda::cross_entropy_rows(logits, tc, ignore_index, num_classes, scale);
#endif
      if (!loss.defined()) loss = reference_rows(logits, tc, ignore_index, num_classes, scale);
      total.add_(loss.sum().to(total.scalar_type()));
      if (grad) {
        at::Tensor rows_of_dh = dh.narrow(0, r0, n);
        at::mm_out(rows_of_dh, logits, weight);
      }
    }
    if (grad) ctx->save_for_backward({dh});
    return total / count;  // all targets ignored: 0 / 0 = NaN, as cross_entropy gives
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor dh = ctx->get_saved_variables()[0];
    return {dh * grads[0].to(dh.scalar_type()), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index, int64_t num_classes,
                         [[maybe_unused]] bool overwrite_logits) {  // read by the CUDA path
  LLMTRAIN_CHECK(logits.dim() == 2, "cross_entropy: logits must be (N, V), got ", logits.sizes());
  check_targets(logits, targets, "cross_entropy");
  if (num_classes < 0) num_classes = logits.size(1);
  LLMTRAIN_CHECK(num_classes >= 1 && num_classes <= logits.size(1), "cross_entropy: num_classes ", num_classes,
                 " must lie in [1, ", logits.size(1), "] for logits ", logits.sizes());
#if LLMTRAIN_WITH_CUDA
  if (cuda_kernel_enabled(Kernel::kCrossEntropy) && cuda::cross_entropy_supported(logits))
    return cuda::cross_entropy(logits, targets, ignore_index, num_classes, overwrite_logits);
#endif
  const bool reduced = logits.scalar_type() == at::kHalf || logits.scalar_type() == at::kBFloat16;
  const at::Tensor classes = logits.narrow(1, 0, num_classes);
  const at::Tensor l = reduced ? classes.to(at::kFloat) : classes;
  return at::cross_entropy_loss(l, targets, /*weight=*/{}, at::Reduction::Mean, ignore_index);
}

at::Tensor linear_cross_entropy(const at::Tensor& h, const at::Tensor& weight, const at::Tensor& targets,
                                int64_t ignore_index, int64_t num_classes, int64_t chunk_rows) {
  LLMTRAIN_CHECK(h.dim() == 2 && weight.dim() == 2 && weight.size(1) == h.size(1),
                 "linear_cross_entropy: h (N, C) and the weight (V, C) do not fit: ", h.sizes(), " and ",
                 weight.sizes());
  check_targets(h, targets, "linear_cross_entropy");
  LLMTRAIN_CHECK(!(at::GradMode::is_enabled() && weight.requires_grad()),
                 "linear_cross_entropy: the weight requires grad, which needs the whole logits: use cross_entropy");
  if (num_classes < 0) num_classes = weight.size(0);
  LLMTRAIN_CHECK(num_classes >= 1 && num_classes <= weight.size(0), "linear_cross_entropy: num_classes ", num_classes,
                 " must lie in [1, ", weight.size(0), "] for the weight ", weight.sizes());
  const auto t = detail::autocast_like_linear({h, weight});
  LLMTRAIN_CHECK(t[0].scalar_type() == t[1].scalar_type() && t[0].device() == targets.device() &&
                     t[1].device() == targets.device(),
                 "linear_cross_entropy: h (", t[0].scalar_type(), ", ", t[0].device(), "), the weight (",
                 t[1].scalar_type(), ", ", t[1].device(), ") and the targets (", targets.device(),
                 ") must share a dtype and a device");
  if (!t[0].is_cuda()) {  // the reference throws for a target outside the classes, as cross_entropy's does
    const at::Tensor counted = targets.ne(ignore_index);
    LLMTRAIN_CHECK(!(counted & (targets.lt(0) | targets.ge(num_classes))).any().item<bool>(),
                   "linear_cross_entropy: a target lies outside [0, ", num_classes, ")");
  }
  LLMTRAIN_CHECK(chunk_rows >= 0, "linear_cross_entropy: chunk_rows must be >= 0 (0: automatic), got ", chunk_rows);
  if (chunk_rows == 0)  // about 256 MiB of logits a chunk, in whole multiples of 64 rows
    chunk_rows = std::max<int64_t>(64, (int64_t(1) << 28) / (weight.size(0) * t[0].element_size()) / 64 * 64);
  return LinearCrossEntropyFn::apply(t[0], t[1].detach(), targets, ignore_index, num_classes, chunk_rows);
}

}  // namespace llmtrain::ops
