// The checks every causal LM makes of a batch before its forward, and of generation's arguments, so that GPT-2 and the
// Llama family refuse bad input with the same words.
#pragma once

#include <torch/types.h>

#include <cstdint>

#include "llmtrain/nn/causal_lm.h"
#include "llmtrain/ops/embedding.h"

namespace llmtrain::nn::detail {

/// idx (B, T) int64 with 1 <= T <= block_size; targets (undefined, or idx's shape, int64, ids or -100);
/// position_ids (undefined, or idx's shape, int64 on its device, counting 0, 1, 2, ... within each
/// document: checked on the CPU). Reports a bad id an earlier CUDA forward found, and queues the
/// targets' check on `ids` (CUDA; on the CPU it throws at once). Errors start with `owner`.
void check_batch(const char* owner, const torch::Tensor& idx, const torch::Tensor& targets,
                 const torch::Tensor& position_ids, int64_t block_size, int64_t vocab_size, ops::IdCheck& ids);

/// A KV cache's capacity in [1, block_size].
void check_cache_size(const char* owner, int64_t capacity, int64_t block_size);

/// prefill's arguments: idx (B, T) int64 with T within the cache and block_size, lengths (B) int64 in
/// [1, T] on idx's device, a cache of `layers` layers and B rows there.
void check_prefill(const char* owner, const torch::Tensor& idx, const torch::Tensor& lengths, const KVCache& cache,
                   int64_t layers, int64_t block_size);

/// decode's arguments: idx and positions (B) int64 on one device, a cache of `layers` layers and B rows.
void check_decode(const char* owner, const torch::Tensor& idx, const torch::Tensor& positions, const KVCache& cache,
                  int64_t layers);

}  // namespace llmtrain::nn::detail
