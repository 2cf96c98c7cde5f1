// Switches for the ops' CUDA kernels. On (the default), ops run kernels/ on the CUDA tensors those
// kernels take; off, an op runs its ATen reference path on any device. All off is the plain-LibTorch
// baseline of benchmarks/bench_train; one op off shows what its kernel is worth inside the whole step,
// and tells a kernel's numerics from the model's.
#pragma once

#include <string>
#include <vector>

namespace llmtrain::ops {

/// The ops with a CUDA path of llmtrain's. kGemv: the few-row products of ops::linear and
/// ops::norm_linear without a gradient.
enum class Kernel {
  kEmbedding,
  kLayerNorm,
  kGelu,
  kLinear,
  kMlp,
  kGemv,
  kCrossEntropy,
  kAdamW,
  kDecodeAttention,
  kRmsNorm,
  kSwiGLU,
  kRotary,
  kNF4,
  kFp8,
  kAttention,
  kAttentionFp8,
};

/// Turns the CUDA kernels of every op on or off for the whole process (thread-safe; takes effect at
/// the next op).
///   llmtrain::ops::set_cuda_kernels_enabled(false);  // ATen reference paths from here on
void set_cuda_kernels_enabled(bool enabled);
/// Whether the CUDA kernels are on (always false in a build without CUDA).
bool cuda_kernels_enabled();

/// Turns one op's CUDA path on or off, by name (one of cuda_kernel_names()); throws llmtrain::Error
/// naming an unknown op. The process-wide switch above still rules over it. All are on at start but
/// "mlp", whose fused cuBLASLt path is correct but slower than ATen's products on the H200 when
/// training (without a gradient ops::mlp takes that fused forward whenever "linear" is on), "attention",
/// whose kernels are correct but slower than cuDNN's SDPA forward and backward, and "attention_fp8",
/// which changes the numbers: with "attention" on, the attention kernel's forward products run in fp8
/// (e4m3, a scale per head; its backward stays bf16).
///   llmtrain::ops::set_cuda_kernel_enabled("mlp", false);  // the MLP on ATen, the rest fused
void set_cuda_kernel_enabled(const std::string& op, bool enabled);
/// Whether `op`'s CUDA path is on: its own switch and the process-wide one.
bool cuda_kernel_enabled(const std::string& op);
/// The same by enum, without a name lookup: what the ops ask on every call.
void set_cuda_kernel_enabled(Kernel op, bool enabled);
bool cuda_kernel_enabled(Kernel op);
/// The names of the ops with a CUDA path, in Kernel's order: embedding, layer_norm, gelu, linear, mlp,
/// gemv, cross_entropy, adamw, decode_attention, rms_norm, swiglu, rotary, nf4, fp8, attention,
/// attention_fp8.
std::vector<std::string> cuda_kernel_names();

}  // namespace llmtrain::ops
