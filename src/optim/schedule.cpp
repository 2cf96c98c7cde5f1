#include "llmtrain/optim/schedule.h"
#include "llmtrain/optim/options.h"

#include <algorithm>
#include <cmath>

#include "llmtrain/core/error.h"

namespace llmtrain::optim {

Precision parse_precision(const std::string& name) { return Choice<Precision>::parse(name, "precision"); }

ScheduleKind parse_schedule(const std::string& name) { return Choice<ScheduleKind>::parse(name, "schedule"); }

void LRSchedule::validate() const {
  LLMTRAIN_CHECK(lr > 0, "schedule: lr must be positive, got ", lr);
  LLMTRAIN_CHECK(warmup_steps >= 0, "schedule: warmup_steps must be >= 0, got ", warmup_steps);
  LLMTRAIN_CHECK(max_steps > 0, "schedule: max_steps must be positive, got ", max_steps);
  LLMTRAIN_CHECK(min_lr_frac >= 0 && min_lr_frac <= 1, "schedule: min_lr_frac must be in [0, 1], got ", min_lr_frac);
  LLMTRAIN_CHECK(decay_frac > 0 && decay_frac <= 1, "schedule: decay_frac must be in (0, 1], got ", decay_frac);
}

double LRSchedule::at(int64_t step) const {
  if (step < warmup_steps) return lr * double(step + 1) / double(warmup_steps);
  const double min_lr = lr * min_lr_frac;
  const auto progress = [&](int64_t from) {  // 0 at `from`, 1 at max_steps
    return from >= max_steps ? 1.0 : std::clamp(double(step - from) / double(max_steps - from), 0.0, 1.0);
  };
  switch (kind) {
    case ScheduleKind::kConstant: return lr;
    case ScheduleKind::kCosine: return min_lr + 0.5 * (1.0 + std::cos(M_PI * progress(warmup_steps))) * (lr - min_lr);
    case ScheduleKind::kLinear: return lr - (lr - min_lr) * progress(warmup_steps);
    case ScheduleKind::kWSD: {
      const int64_t decay_start = std::max(warmup_steps, max_steps - int64_t(std::llround(decay_frac * max_steps)));
      return step < decay_start ? lr : lr - (lr - min_lr) * progress(decay_start);
    }
  }
  return lr;
}

}  // namespace llmtrain::optim
