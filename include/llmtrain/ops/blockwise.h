// Block-wise absmax quantization, the scheme bitsandbytes uses for NF4 weights, their scales and 8-bit
// optimizer state: a tensor is flattened and cut into blocks of `block` values; each block is scaled by
// its absolute maximum (a full block by that maximum's reciprocal, the last partial block by division,
// as bitsandbytes scales), clamped to [-1, 1], and each value stored as the index of the nearest entry
// of a sorted map (a value halfway between two entries takes the lower). An all-zero block stays zero.
// The quantizer itself is internal to the ops (src/ops/tables.h); the maps are public for tests and tools.
#pragma once

#include <ATen/core/Tensor.h>

namespace llmtrain::ops {

/// bitsandbytes' 8-bit dynamic map (create_dynamic_map): 256 sorted float32 values on the CPU. Signed:
/// for exponents 10^-6 .. 10^0, the midpoints of 2^i + 1 points spread over [0.1, 1], both signs, then 0
/// and 1 (in [-1, 1]); unsigned: 2^(i+1) + 1 points, positive, then 0 and 1 (in [0, 1]).
const at::Tensor& dynamic_map(bool is_signed = true);

}  // namespace llmtrain::ops
