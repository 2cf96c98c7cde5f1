// Learning-rate schedules. Step s (from 0) warms up linearly to lr over warmup_steps
// (lr * (s + 1) / warmup_steps), then follows the schedule down to min_lr = lr * min_lr_frac at max_steps:
// constant (stays at lr), cosine (half a cosine), linear, or wsd (warmup-stable-decay: lr until the
// last decay_frac of the steps, then linear to min_lr).
#pragma once

#include <cstdint>
#include <string>

#include "llmtrain/core/choice.h"

namespace llmtrain::optim {

enum class ScheduleKind { kConstant, kCosine, kLinear, kWSD };

inline const ChoiceNames<ScheduleKind>& choice_names(ScheduleKind) {
  static const ChoiceNames<ScheduleKind> names{{ScheduleKind::kConstant, "constant"},
                                               {ScheduleKind::kCosine, "cosine"},
                                               {ScheduleKind::kLinear, "linear"},
                                               {ScheduleKind::kWSD, "wsd"}};
  return names;
}

/// Parses "constant", "cosine", "linear" or "wsd"; throws llmtrain::Error naming the value otherwise.
ScheduleKind parse_schedule(const std::string& name);

/// The learning rate at each step.
///   LRSchedule s{ScheduleKind::kCosine, 6e-4, 700, 19073, 0.1};  double lr = s.at(step);
struct LRSchedule {
  ScheduleKind kind = ScheduleKind::kConstant;
  double lr = 6e-4;
  int64_t warmup_steps = 0;
  int64_t max_steps = 1;
  double min_lr_frac = 0.0;
  double decay_frac = 0.2;  // wsd only

  /// Throws llmtrain::Error naming the first field out of range.
  void validate() const;
  double at(int64_t step) const;
};

}  // namespace llmtrain::optim
