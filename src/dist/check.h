// Argument checks that every Communicator makes alike.
#pragma once

#include <torch/types.h>

#include "llmtrain/core/error.h"

namespace llmtrain::dist::detail {

/// `whole` must hold world parts the size of `part`, of its dtype (reduce_scatter_sum, all_gather).
inline void check_parts(const char* what, const torch::Tensor& whole, const torch::Tensor& part, int world) {
  LLMTRAIN_CHECK(whole.numel() == part.numel() * world && whole.scalar_type() == part.scalar_type(), what, ": the ",
                 "whole tensor must hold ", world, " parts of ", part.numel(), " ", part.scalar_type(), ", got ",
                 whole.numel(), " ", whole.scalar_type());
}

}  // namespace llmtrain::dist::detail
