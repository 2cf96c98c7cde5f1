// A tensor's values on their way to the host behind the work already queued on its device, so that
// the host can go on queueing and read them later: the way a training step logs its loss and norm
// without waiting for the device to finish the step.
#pragma once

#include <c10/core/Event.h>
#include <torch/types.h>

#include <optional>

namespace llmtrain {

class HostCopy {
 public:
  HostCopy() = default;
  /// Queues the copy of `src` into pinned host memory on the current stream of src's device (for a
  /// CPU tensor: a copy made at once).
  explicit HostCopy(const torch::Tensor& src);
  bool defined() const { return host_.defined(); }
  /// The copied values, after waiting for the copy (and so for everything queued before it).
  const torch::Tensor& get();

 private:
  torch::Tensor host_;
  std::optional<c10::Event> done_;
};

}  // namespace llmtrain
