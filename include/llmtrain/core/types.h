// Constants shared across layers.
#pragma once

#include <cstdint>

namespace llmtrain {

/// The target id that contributes nothing to the loss (PyTorch's and Hugging Face's convention):
/// cross_entropy skips it, and the SFT data puts it on prompt tokens and padding.
constexpr int64_t kIgnoreIndex = -100;

}  // namespace llmtrain
