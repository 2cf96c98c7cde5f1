// A checkpoint's state.json: what a resume needs besides the tensors, and the run's config. Read and
// written in this one place, without LibTorch (the fuzzers reach it); every field is checked for type
// and range with errors that name the file and the key.
#pragma once

#include <cstdint>
#include <string>

#include "llmtrain/nn/model_spec.h"
#include "llmtrain/optim/options.h"

namespace llmtrain::train::detail {

struct CheckpointState {
  int64_t step = 0;
  double elapsed_s = 0;
  bool model_only = false;                 // a converted model (convert, save_model_checkpoint): nothing to resume
  nn::ModelSpec model = nn::GPT2Config();  // its family and shape (dropout is the config's)
  Choice<optim::Precision> precision = optim::Precision::kFP32;  // train.precision of the run
  int64_t zero_ranks = 0;  // ranks the optimizer state is sharded over (ZeRO-1), 0: unsharded
  double loss_scale = 1;   // fp16's GradScaler
  int64_t good_steps = 0;
  int64_t epoch = 0, shard = 0, position = 0;  // the train loader's place
  std::string config;                          // the run's TrainerConfig, as JSON text

  std::string to_json() const;
  /// Throws llmtrain::Error naming `source` and the key for text that is not an llmtrain checkpoint
  /// state of this version or a field of the wrong type or range.
  static CheckpointState parse(const std::string& text, const std::string& source);
  /// The state.json of checkpoint folder `dir`, checked whole.
  static CheckpointState read(const std::string& dir);
};

}  // namespace llmtrain::train::detail
