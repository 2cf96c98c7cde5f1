// The run folder's rule, shared by the Trainer and the driver.
#pragma once

#include "llmtrain/train/config.h"

namespace llmtrain::train::detail {

/// out_dir is none of the places an output may never be (fs::check_output: the working folder, an
/// input...), and writing the run's files there overwrites nothing llmtrain did not write, unless `force`.
void check_run_folder(const TrainerConfig& c, bool force);

}  // namespace llmtrain::train::detail
