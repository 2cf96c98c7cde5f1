#include "lm_inputs.h"

#include "llmtrain/core/error.h"
#include "llmtrain/core/types.h"
#include "llmtrain/ops/dispatch.h"

namespace llmtrain::nn::detail {

void check_batch(const char* owner, const torch::Tensor& idx, const torch::Tensor& targets,
                 const torch::Tensor& position_ids, int64_t block_size, int64_t vocab_size, ops::IdCheck& ids) {
  LLMTRAIN_CHECK(idx.dim() == 2, owner, ": idx must be (B, T), got shape ", idx.sizes());
  LLMTRAIN_CHECK(idx.scalar_type() == torch::kLong, owner, ": idx must be int64, got ", idx.scalar_type());
  LLMTRAIN_CHECK(idx.size(1) >= 1 && idx.size(1) <= block_size, owner, ": sequence length ", idx.size(1),
                 " is outside [1, block_size ", block_size, "]");
  ids.raise(/*wait=*/false);  // a bad id that an earlier forward on the GPU found
  if (targets.defined()) {
    LLMTRAIN_CHECK(targets.sizes() == idx.sizes(), owner, ": targets must have the shape of idx ", idx.sizes(),
                   ", got ", targets.sizes());
    LLMTRAIN_CHECK(targets.scalar_type() == torch::kLong, owner, ": targets must be int64, got ",
                   targets.scalar_type());
    ids.check(targets, "targets", vocab_size, kIgnoreIndex);
    if (!ops::cuda_kernel_enabled(ops::Kernel::kCrossEntropy))
      ids.raise();  // ATen's loss asserts on a bad id, on the device
  }
  if (position_ids.defined()) {
    LLMTRAIN_CHECK(position_ids.sizes() == idx.sizes() && position_ids.scalar_type() == torch::kLong &&
                       position_ids.device() == idx.device(),
                   owner, ": position_ids must be ", idx.sizes(), " int64 on ", idx.device(), " as idx, got ",
                   position_ids.sizes(), " ", position_ids.scalar_type(), " on ", position_ids.device());
    // Each position at most the one before it plus one: a document goes on, or a new one starts at 0.
    if (!position_ids.is_cuda() && position_ids.numel() > 0) {
      const auto steps = position_ids.narrow(1, 1, idx.size(1) - 1) - position_ids.narrow(1, 0, idx.size(1) - 1);
      const auto next = position_ids.narrow(1, 1, idx.size(1) - 1);
      LLMTRAIN_CHECK(
          position_ids.select(1, 0).eq(0).all().item<bool>() && (steps.eq(1) | next.eq(0)).all().item<bool>(), owner,
          ": position_ids must count 0, 1, 2, ... within each document of a row, starting at 0");
    }
  }
}

}  // namespace llmtrain::nn::detail
