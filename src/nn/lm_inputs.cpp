#include "lm_inputs.h"

#include <algorithm>

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

void check_cache_size(const char* owner, int64_t capacity, int64_t block_size) {
  LLMTRAIN_CHECK(capacity >= 1 && capacity <= block_size, owner, ": a KV cache's capacity ", capacity,
                 " is outside [1, block_size ", block_size, "]");
}

namespace {

void check_cache(const char* owner, const char* what, const KVCache& cache, int64_t B, const torch::Device& device,
                 int64_t layers) {
  LLMTRAIN_CHECK(int64_t(cache.k.size()) == layers && cache.v.size() == cache.k.size(), owner, "::", what,
                 ": the cache has ", cache.k.size(), " layers, the model ", layers);
  LLMTRAIN_CHECK(cache.batch() == B, owner, "::", what, ": the cache holds ", cache.batch(), " rows, the batch has ",
                 B);
  LLMTRAIN_CHECK(cache.k[0].device() == device, owner, "::", what, ": the cache is on ", cache.k[0].device(),
                 ", the ids on ", device);
}

}  // namespace

void check_prefill(const char* owner, const torch::Tensor& idx, const torch::Tensor& lengths, const KVCache& cache,
                   int64_t layers, int64_t block_size) {
  LLMTRAIN_CHECK(idx.dim() == 2 && idx.scalar_type() == torch::kLong, owner,
                 "::prefill: idx must be (B, T) int64, got ", idx.sizes(), " ", idx.scalar_type());
  const int64_t B = idx.size(0), T = idx.size(1);
  LLMTRAIN_CHECK(T >= 1 && T <= cache.capacity() && T <= block_size, owner, "::prefill: prompt length ", T,
                 " is outside [1, ", std::min(cache.capacity(), block_size), "] (the cache's capacity ",
                 cache.capacity(), ", block_size ", block_size, ")");
  LLMTRAIN_CHECK(lengths.dim() == 1 && lengths.size(0) == B && lengths.scalar_type() == torch::kLong &&
                     lengths.device() == idx.device(),
                 owner, "::prefill: lengths must be (", B, ") int64 on ", idx.device(), ", got ", lengths.sizes(), " ",
                 lengths.scalar_type(), " on ", lengths.device());
  check_cache(owner, "prefill", cache, B, idx.device(), layers);
  LLMTRAIN_CHECK(B == 0 || (lengths.min().item<int64_t>() >= 1 && lengths.max().item<int64_t>() <= T), owner,
                 "::prefill: every length must lie in [1, ", T, "]");
}

void check_decode(const char* owner, const torch::Tensor& idx, const torch::Tensor& positions, const KVCache& cache,
                  int64_t layers) {
  LLMTRAIN_CHECK(idx.dim() == 1 && idx.scalar_type() == torch::kLong, owner, "::decode: idx must be (B) int64, got ",
                 idx.sizes(), " ", idx.scalar_type());
  const int64_t B = idx.size(0);
  LLMTRAIN_CHECK(
      positions.sizes() == idx.sizes() && positions.scalar_type() == torch::kLong && positions.device() == idx.device(),
      owner, "::decode: positions must be (", B, ") int64 on ", idx.device(), ", got ", positions.sizes(), " ",
      positions.scalar_type(), " on ", positions.device());
  check_cache(owner, "decode", cache, B, idx.device(), layers);
}

}  // namespace llmtrain::nn::detail
