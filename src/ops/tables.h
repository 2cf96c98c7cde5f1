// The ops' static lookup tables (NF4's levels, the dynamic maps) on a device: copied there once and
// kept, not at every call (QLoRA dequantizes each layer in every forward and backward, and the 8-bit
// optimizer quantizes every step). Only for tables that live as long as the program.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>

namespace llmtrain::ops::detail {

/// `table` (a static CPU tensor) on `device`; `table` itself on the CPU.
const at::Tensor& table_on(const at::Tensor& table, const at::Device& device);

/// The midpoints between a sorted map's neighbours (numel - 1, float32): a value's code is the number
/// of midpoints below it. For a static map, on `device`, cached as table_on caches.
const at::Tensor& midpoints_on(const at::Tensor& map, const at::Device& device);

/// Block-wise quantization as ops/blockwise.h describes it, of a float32 `flat` tensor against a map's
/// midpoints on its device: the codes (uint8) and the blocks' absmaxes (float32). And back: map[codes]
/// times their block's absmax, float32, flat.
std::pair<at::Tensor, at::Tensor> quantize_blocks(const at::Tensor& flat, int64_t block, const at::Tensor& midpoints);
at::Tensor dequantize_blocks(const at::Tensor& codes, const at::Tensor& absmax, int64_t block, const at::Tensor& map);

}  // namespace llmtrain::ops::detail
