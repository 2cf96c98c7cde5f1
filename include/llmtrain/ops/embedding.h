// GPT-2's input embedding, x[b, t] = wte[idx[b, t]] + wpe[t], and the checking of token ids that comes
// with it. On a CUDA device the ids are checked by the kernels themselves and the verdict is read back
// later through an IdCheck, at a point where the host waits for the GPU anyway (the logged loss), so
// that checking never stalls the step; on the CPU a bad id throws at once.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace llmtrain::ops {
namespace cuda {
class BadIdRecord;
}

/// Checks of token ids whose CUDA verdicts are collected and reported later.
///   ops::IdCheck ids("GPT2");
///   ids.check(targets, "targets", 50257, -100);   // CPU: throws now; CUDA: queued on the stream
///   ... loss.item<float>(); ids.raise();          // throws llmtrain::Error for a bad CUDA id
class IdCheck {
 public:
  /// `owner` starts every message ("GPT2: targets holds token id ...").
  explicit IdCheck(std::string owner = "");
  ~IdCheck();
  IdCheck(const IdCheck&);  // a copy (a cloned module) starts with nothing queued
  IdCheck& operator=(const IdCheck&);

  /// Each of `ids` (int64, any shape) must lie in [0, num_ids), or equal `ignore_index` when one is
  /// given. CPU tensors are checked now: llmtrain::Error names `what`, the id and its position. CUDA
  /// tensors are checked on the device in stream order, and raise() reports what was found.
  void check(const at::Tensor& ids, const std::string& what, int64_t num_ids,
             std::optional<int64_t> ignore_index = std::nullopt);
  /// Throws llmtrain::Error naming the first bad id that the CUDA checks queued so far found, then
  /// forgets it. `wait`: wait for those checks first; otherwise report only checks already finished
  /// (never blocks).
  void raise(bool wait = true);

  struct Impl;

 private:
  friend at::Tensor embedding(const at::Tensor&, const at::Tensor&, const at::Tensor&, int64_t, IdCheck&,
                              const at::Tensor&);
  cuda::BadIdRecord& record_on(const at::Device& device);  // CUDA builds: the record for that device
  std::string owner_;
  std::unique_ptr<Impl> impl_;
};

/// x[b, t] = wte[idx[b, t]] + wpe[start[b] + t]: (B, T, C) in the dtype of wte (and wpe), for int64 ids
/// (B, T); `start` (B) int64 offsets the positions of each row (undefined: 0), as decoding token by
/// token needs; `start` (B, T) int64 gives every token's position (packed documents: x[b, t] = wte[idx[b,
/// t]] + wpe[start[b, t]], with a backward, through ATen). Each id must lie in [0, num_ids) (num_ids <= wte's rows: a
/// padded vocabulary's extra rows are not ids): on the CPU a bad id throws llmtrain::Error at once; on CUDA the kernel
/// gives its row NaN and `check` reports it (IdCheck::raise). Positions must lie within wpe's rows: checked on the CPU,
/// a NaN row on CUDA (a device-side assert for (B, T) positions). On CUDA the backward is deterministic; with (B)
/// `start` there is none (inference: call it under torch::NoGradGuard).
///   auto x = llmtrain::ops::embedding(idx, wte, wpe, 50257, ids);
at::Tensor embedding(const at::Tensor& idx,                                           // (B, T) int64
                     const at::Tensor& wte,                                           // (V, C)
                     const at::Tensor& wpe,                                           // (>= T, C)
                     int64_t num_ids, IdCheck& check, const at::Tensor& start = {});  // (B) or (B, T) int64

}  // namespace llmtrain::ops
