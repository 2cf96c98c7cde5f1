// ops::cross_entropy's CUDA path: the fused classifier.
#pragma once

#include <cstdint>

#include "cuda_common.h"

namespace llmtrain::ops::cuda {

/// True when the fused classifier takes these logits: a CUDA tensor of float32, bfloat16 or float16
/// with unit column stride.
bool cross_entropy_supported(const at::Tensor& logits);
/// ops::cross_entropy on the fused classifier (an autograd function).
at::Tensor cross_entropy(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index, int64_t num_classes,
                         bool overwrite_logits);
/// The fused classifier's forward over contiguous logits (n, cols), and with `scale` (a device scalar;
/// undefined: no gradient) its backward at once: returns each row's loss (n, float32, 0 for an ignored
/// target) and overwrites the logits with their gradient times the scale.
at::Tensor cross_entropy_rows(const at::Tensor& logits, const at::Tensor& targets, int64_t ignore_index,
                              int64_t num_classes, const at::Tensor& scale);

}  // namespace llmtrain::ops::cuda
