// One switch for every op's CUDA kernels. On (the default), ops run kernels/ on the CUDA tensors those
// kernels take; off, every op runs its ATen reference path on any device: the plain-LibTorch baseline
// of benchmarks/bench_train, and a way to tell a kernel's numerics from the model's.
#pragma once

namespace llmtrain::ops {

/// Turns the CUDA kernels on or off for the whole process (thread-safe; takes effect at the next op).
///   llmtrain::ops::set_cuda_kernels_enabled(false);  // ATen reference paths from here on
void set_cuda_kernels_enabled(bool enabled);
/// Whether the CUDA kernels are on (always false in a build without CUDA).
bool cuda_kernels_enabled();

}  // namespace llmtrain::ops
