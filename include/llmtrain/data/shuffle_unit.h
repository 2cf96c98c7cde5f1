// What a shuffled DataLoader puts in a seeded order (llmtrain/data/dataloader.h), apart from the loader,
// so that configs name it without LibTorch.
#pragma once

#include "llmtrain/core/choice.h"

namespace llmtrain::data {

/// Single windows, or whole batches of consecutive windows (world_size * batch_size of them, in llm.c's
/// order: one 32-bit Mersenne Twister seeded with the seed; each epoch permutes the last epoch's shard
/// order, then each shard entered its batches).
enum class ShuffleUnit { kWindow, kBatch };

inline const ChoiceNames<ShuffleUnit>& choice_names(ShuffleUnit) {
  static const ChoiceNames<ShuffleUnit> names{{ShuffleUnit::kWindow, "window"}, {ShuffleUnit::kBatch, "batch"}};
  return names;
}

}  // namespace llmtrain::data
