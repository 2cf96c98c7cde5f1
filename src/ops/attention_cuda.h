// ops::decode_attention's CUDA path.
#pragma once

#include "cuda_common.h"

namespace llmtrain::ops::cuda {

/// True when the decode-attention kernel takes these: CUDA tensors of float32, bf16 or fp16, contiguous
/// caches with heads the kernel fits (kernels::decode_attention_fits), qkv rows 16-byte aligned.
bool decode_attention_supported(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache);
/// ops::decode_attention on the kernel (arguments already checked for shapes, dtypes and devices).
at::Tensor decode_attention(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& positions, int64_t window);

}  // namespace llmtrain::ops::cuda
