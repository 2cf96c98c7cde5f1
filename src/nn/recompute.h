// The autograd side of activation recompute (nn/recompute.h): a piece of the forward run without
// autograd's record of its inside, and run again with it when backward reaches the piece.
#pragma once

#include <torch/types.h>

#include <functional>
#include <vector>

namespace llmtrain::nn::detail {

/// A piece of a forward: tensors in (some may be undefined), tensors out.
using Piece = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

/// piece(inputs), keeping only `inputs` for backward. Backward runs piece again on them with
/// gradients on (so it must hold what it captures by value), then backward through it: the parameters inside get their
/// gradients there, the inputs theirs through the result. The piece must compute the same thing both times (no dropout:
/// its random draws would differ). Under no grad mode it is piece(inputs), nothing kept.
///   auto out = recompute([&](const auto& in) { return std::vector{mlp(in[0])}; }, {m});
std::vector<torch::Tensor> recompute(const Piece& piece, const std::vector<torch::Tensor>& inputs);

}  // namespace llmtrain::nn::detail
