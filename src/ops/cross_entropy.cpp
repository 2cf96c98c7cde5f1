#include "llmtrain/ops/cross_entropy.h"

#include <ATen/ATen.h>

#include "llmtrain/core/error.h"

namespace llmtrain::ops {

at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index) {
  LLMTRAIN_CHECK(logits.dim() == 2, "cross_entropy: logits must be (N, V), got ", logits.sizes());
  LLMTRAIN_CHECK(targets.dim() == 1 && targets.size(0) == logits.size(0),
                 "cross_entropy: targets must be (", logits.size(0), ") to match logits ",
                 logits.sizes(), ", got ", targets.sizes());
  LLMTRAIN_CHECK(targets.scalar_type() == at::kLong, "cross_entropy: targets must be int64, got ",
                 targets.scalar_type());
  const bool reduced = logits.scalar_type() == at::kHalf || logits.scalar_type() == at::kBFloat16;
  const at::Tensor l = reduced ? logits.to(at::kFloat) : logits;
  return at::cross_entropy_loss(l, targets, /*weight=*/{}, at::Reduction::Mean, ignore_index);
}

}  // namespace llmtrain::ops
