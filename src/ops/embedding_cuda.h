// ops::embedding's CUDA path and the device side of ops::IdCheck.
#pragma once

#include <optional>

#include "cuda_common.h"

namespace llmtrain::ops::cuda {

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

}  // namespace llmtrain::ops::cuda
