// The checks every causal LM makes of a batch before its forward, so that GPT-2 and the Llama family
// refuse bad input with the same words.
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "llmtrain/ops/embedding.h"

namespace llmtrain::nn::detail {

/// idx (B, T) int64 with 1 <= T <= block_size; targets (undefined, or idx's shape, int64, ids or -100);
/// position_ids (undefined, or idx's shape, int64 on its device, counting 0, 1, 2, ... within each
/// document: checked on the CPU). Reports a bad id an earlier CUDA forward found, and queues the
/// targets' check on `ids` (CUDA; on the CPU it throws at once). Errors start with `owner`.
void check_batch(const char* owner, const torch::Tensor& idx, const torch::Tensor& targets,
                 const torch::Tensor& position_ids, int64_t block_size, int64_t vocab_size, ops::IdCheck& ids);

}  // namespace llmtrain::nn::detail
