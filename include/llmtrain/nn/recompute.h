// Activation recompute: what a training forward keeps for backward. A recomputed part keeps only its
// inputs and runs its forward again during backward (with the same kernels, so the gradients are the
// same bits), trading that second forward for its intermediates' memory.
#pragma once

#include "llmtrain/core/choice.h"

namespace llmtrain::nn {

/// none: every activation kept; mlp: each block's MLP recomputed (its 4x-wide intermediates, the most
/// memory); block: each whole block recomputed (only the residual stream between blocks kept).
enum class Recompute { kNone, kMlp, kBlock };
inline const ChoiceNames<Recompute>& choice_names(Recompute) {
  static const ChoiceNames<Recompute> names{
      {Recompute::kNone, "none"}, {Recompute::kMlp, "mlp"}, {Recompute::kBlock, "block"}};
  return names;
}

}  // namespace llmtrain::nn
