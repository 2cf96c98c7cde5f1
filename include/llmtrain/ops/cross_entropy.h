// Mean softmax cross-entropy of logits against target ids, skipping ignored targets. Reduced-precision
// logits are reduced in float32, so the loss of a bf16 model is as exact as its logits allow.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

#include "llmtrain/core/types.h"

namespace llmtrain::ops {

using ::llmtrain::kIgnoreIndex;

/// Mean over the targets != ignore_index of -log softmax(logits)[target]; a scalar (float32 for
/// half/bf16 logits). Like PyTorch, a batch whose targets are all ignored gives NaN. Only the first
/// `num_classes` columns are classes (-1: all); the rest are padding (a padded vocabulary) that gets
/// no probability and a zero gradient. On CUDA (float32, bf16, fp16 logits with unit column stride)
/// this is the fused classifier of kernels/cross_entropy.cu, where a target outside [0, num_classes)
/// makes the loss NaN; elsewhere the ATen reference, which throws for it.
/// `overwrite_logits`: for logits nothing else reads after backward (a training step's), the fused
/// classifier writes their gradient over them in place instead of into a second (N, C) buffer;
/// backward can then run only once (a second one throws).
///   auto loss = llmtrain::ops::cross_entropy(logits.flatten(0, 1), targets.flatten());
at::Tensor cross_entropy(const at::Tensor& logits,   // (N, C), rows may be strided
                         const at::Tensor& targets,  // (N) int64
                         int64_t ignore_index = kIgnoreIndex, int64_t num_classes = -1, bool overwrite_logits = false);

/// cross_entropy(h W^T, targets, ignore_index, num_classes) for a classifier W that takes no gradient
/// (a frozen head: LoRA's, QLoRA's; or any head under NoGradGuard), without the (N, V) logits: the
/// rows go in chunks of `chunk_rows` (0: about 256 MiB of logits), each chunk's loss and, when h requires grad, its
/// gradient with respect to h computed in the forward pass and the chunk's logits freed. Memory holds
/// one chunk and h's gradient (N, C) instead of the whole logits; the products are the same. Throws when
/// W requires grad under grad mode (use cross_entropy on the logits: W's gradient needs them).
///   auto loss = llmtrain::ops::linear_cross_entropy(h.flatten(0, 1), head_weight, targets.flatten());
at::Tensor linear_cross_entropy(const at::Tensor& h,        // (N, C)
                                const at::Tensor& weight,   // (V or padded V, C)
                                const at::Tensor& targets,  // (N) int64
                                int64_t ignore_index = kIgnoreIndex, int64_t num_classes = -1, int64_t chunk_rows = 0);

}  // namespace llmtrain::ops
