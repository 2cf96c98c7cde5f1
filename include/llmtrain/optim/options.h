// What the optimizer loop is asked to do, apart from the loop itself (llmtrain/optim/optimizer.h), so
// that configs are read and checked without LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include "llmtrain/core/choice.h"
#include "llmtrain/optim/schedule.h"

namespace llmtrain::optim {

enum class Precision { kFP32, kBF16, kFP16, kBF16Master };

inline const ChoiceNames<Precision>& choice_names(Precision) {
  static const ChoiceNames<Precision> names{{Precision::kFP32, "fp32"},
                                            {Precision::kBF16, "bf16"},
                                            {Precision::kFP16, "fp16"},
                                            {Precision::kBF16Master, "bf16-master"}};
  return names;
}

/// Parses "fp32", "bf16", "fp16" or "bf16-master"; throws llmtrain::Error naming the value otherwise.
Precision parse_precision(const std::string& name);

/// How bf16-master rounds its bf16 copies from the fp32 masters.
enum class Rounding { kStochastic, kNearest };

inline const ChoiceNames<Rounding>& choice_names(Rounding) {
  static const ChoiceNames<Rounding> names{{Rounding::kStochastic, "stochastic"}, {Rounding::kNearest, "nearest"}};
  return names;
}

/// How AdamW keeps its moments: float32, or bitsandbytes' blockwise 8-bit state (ops/adamw.h), a
/// quarter of the memory.
enum class StateFormat { kFP32, k8Bit };

inline const ChoiceNames<StateFormat>& choice_names(StateFormat) {
  static const ChoiceNames<StateFormat> names{{StateFormat::kFP32, "fp32"}, {StateFormat::k8Bit, "8bit"}};
  return names;
}

/// How the fp16 loss scale starts and moves.
struct GradScalerOptions {
  double init_scale = 65536.0, growth_factor = 2.0, backoff_factor = 0.5;
  int64_t growth_interval = 2000;
};

/// Everything the optimizer loop needs.
struct OptimizerOptions {
  LRSchedule schedule;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8;
  double weight_decay = 0.1;
  double grad_clip = 1.0;  // <= 0: no clipping (the norm is still measured)
  Precision precision = Precision::kFP32;
  // bf16-master: the bf16 copies are rounded stochastically from the masters (as llm.c rounds them),
  // with bits drawn from (seed, step, tensor, element): a resumed run rounds as an unbroken one.
  bool stochastic_rounding = true;
  uint64_t seed = 0;
  GradScalerOptions scaler;
  StateFormat state = StateFormat::kFP32;
  // 8bit: tensors of fewer elements keep float32 moments (biases, norms: bitsandbytes' min_8bit_size).
  int64_t min_8bit_size = 4096;
  // The moments in pinned host memory, read and written by the update over the bus (CUDA parameters;
  // the role of bitsandbytes' paged optimizers): device memory for larger models, at the bus's speed.
  bool paged = false;
};

}  // namespace llmtrain::optim
