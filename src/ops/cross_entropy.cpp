#include "llmtrain/ops/cross_entropy.h"

#include <ATen/ATen.h>

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#if LLMTRAIN_WITH_CUDA
#include "cross_entropy_cuda.h"
#endif

namespace llmtrain::ops {

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index, int64_t num_classes,
                         [[maybe_unused]] bool overwrite_logits) {  // read by the CUDA path
  LLMTRAIN_CHECK(logits.dim() == 2, "cross_entropy: logits must be (N, V), got ", logits.sizes());
  LLMTRAIN_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0), "cross_entropy: targets must be (",
                 logits.size(0), ") to match logits ", logits.sizes(), ", got ", targets.sizes());
  LLMTRAIN_CHECK(targets.scalar_type() == at::kLong, "cross_entropy: targets must be int64, got ",
                 targets.scalar_type());
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

}  // namespace llmtrain::ops
