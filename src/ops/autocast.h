// ATen's autocast rule for linear layers, for the ops whose kernels are called outside the dispatcher
// (which would otherwise miss it): under CUDA autocast every operand in the autocast dtype, weights
// cast once per autocast region through ATen's cache.
#pragma once

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include <vector>

namespace llmtrain::ops::detail {

inline std::vector<at::Tensor> autocast_like_linear(std::vector<at::Tensor> ts) {
  if (ts[0].is_cuda() && at::autocast::is_autocast_enabled(at::kCUDA)) {
    const auto dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    for (auto& t : ts) t = at::autocast::cached_cast(dtype, t, at::kCUDA);
  }
  return ts;
}

}  // namespace llmtrain::ops::detail
