// ops::decode_attention's and ops::rotary's CUDA paths.
#pragma once

#include "cuda_common.h"

namespace llmtrain::ops::cuda {

/// True when the decode-attention kernel takes these: CUDA tensors of float32, bf16 or fp16, contiguous
/// caches with heads the kernel fits (kernels::decode_attention_fits), qkv rows 16-byte aligned.
bool decode_attention_supported(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache);
/// ops::decode_attention on the kernel (arguments already checked for shapes, dtypes and devices).
at::Tensor decode_attention(const at::Tensor& qkv, const at::Tensor& k_cache, const at::Tensor& v_cache,
                            const at::Tensor& positions, int64_t window, const at::Tensor& inv_freq);

/// True when the Hopper flash-attention kernel (kernels/attention) takes causal attention over these:
/// bf16 on one CUDA device of compute capability 9.0, head dim 64 or 128, D contiguous, 16-byte aligned.
bool flash_attention_supported(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v);
/// ops::attention without a mask on the kernels (an autograd function): (B, H, T, D), stored (B, T, H, D)
/// as ATen's flash backend stores it. fp8: the forward's products in fp8 (kernels::FlashFp8: q, k and v
/// rounded to e4m3 under a scale per head), the backward as bf16's.
at::Tensor flash_attention(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, bool fp8);

/// True when the rotary kernel takes x: a CUDA tensor of float32, bf16 or fp16 whose head size it fits
/// (kernels::rotary_fits).
bool rotary_supported(const at::Tensor& x);
/// ops::rotary on the kernel (an autograd function; the tables already checked).
at::Tensor rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin);

}  // namespace llmtrain::ops::cuda
