// Mean softmax cross-entropy of logits against target ids, skipping ignored targets. Reduced-precision
// logits are reduced in float32, so the loss of a bf16 model is as exact as its logits allow.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "llmtrain/core/types.h"

namespace llmtrain::ops {

using ::llmtrain::kIgnoreIndex;

/// Mean over the targets != ignore_index of -log softmax(logits)[target]; a scalar (float32 for
/// half/bf16 logits). Like PyTorch, a batch whose targets are all ignored gives NaN.
///   auto loss = llmtrain::ops::cross_entropy(logits.flatten(0, 1), targets.flatten());
at::Tensor cross_entropy(const at::Tensor& logits,   // (N, V), rows may be strided
                         const at::Tensor& targets,  // (N) int64
                         int64_t ignore_index = kIgnoreIndex);

}  // namespace llmtrain::ops
