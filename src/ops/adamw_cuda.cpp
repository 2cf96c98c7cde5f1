// The multi-tensor optimizer kernels' glue: one table of tensor descriptors and chunks per call, built
// on the host and sent in one asynchronous copy from pinned memory (the caching host allocator keeps it
// alive until the copy is done).
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>

#include <cstring>

#include "adamw_cuda.h"
#include "kernels/adamw.cuh"
#include "llmtrain/core/cuda_check.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/blockwise.h"
#include "tables.h"

namespace llmtrain::ops::cuda {
namespace {

// The descriptors and chunks of `tensors`, on the device: (tensors, chunks, number of chunks).
template <typename Tensor>
struct Table {
  at::Tensor blob;  // keeps the device copy alive for the launches on this stream
  const Tensor* tensors;
  const kernels::AdamWChunk* chunks;
  int64_t num_chunks;
};

template <typename Tensor>
Table<Tensor> upload(const std::vector<Tensor>& tensors, const at::Device& device) {
  std::vector<kernels::AdamWChunk> chunks;
  for (size_t i = 0; i < tensors.size(); ++i)
    for (int64_t s = 0; s < tensors[i].numel; s += kernels::kAdamWChunk) chunks.push_back({int64_t(i), s});
  const size_t tbytes = tensors.size() * sizeof(Tensor), cbytes = chunks.size() * sizeof(kernels::AdamWChunk);
  at::Tensor host = at::empty({int64_t(tbytes + cbytes)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::memcpy(host.data_ptr(), tensors.data(), tbytes);
  std::memcpy(static_cast<char*>(host.data_ptr()) + tbytes, chunks.data(), cbytes);
  Table<Tensor> t;
  t.blob = host.to(device, /*non_blocking=*/true);
  const char* base = static_cast<const char*>(t.blob.data_ptr());
  t.tensors = reinterpret_cast<const Tensor*>(base);
  t.chunks = reinterpret_cast<const kernels::AdamWChunk*>(base + tbytes);
  t.num_chunks = int64_t(chunks.size());
  return t;
}

void check_contiguous(const at::Tensor& t, const char* name, size_t i) {
  LLMTRAIN_CHECK(t.is_contiguous() && t.is_cuda(), "optimizer kernels: ", name, "[", i,
                 "] must be a contiguous CUDA tensor");
}

// Where the kernel finds optimizer state: a CUDA tensor's data, or pinned host memory mapped into the
// device's address space (paged state, read and written over the bus).
void* state_pointer(const at::Tensor& t, size_t i) {
  LLMTRAIN_CHECK(t.is_contiguous(), "optimizer kernels: optimizer state [", i, "] must be contiguous");
  if (t.is_cuda()) return t.data_ptr();
  void* mapped = nullptr;
  LLMTRAIN_CHECK(t.is_pinned() && cudaHostGetDevicePointer(&mapped, t.data_ptr(), 0) == cudaSuccess,
                 "optimizer kernels: optimizer state [", i, "] is in host memory the device cannot map (not pinned)");
  return mapped;
}

}  // namespace

at::Tensor grad_norm_scale(const std::vector<at::Tensor>& grads, double inv_scale, double max_norm) {
  std::vector<kernels::AdamWTensor> table;
  for (size_t i = 0; i < grads.size(); ++i) {
    check_contiguous(grads[i], "grads", i);
    kernels::AdamWTensor d{};
    d.grad = grads[i].data_ptr();
    d.numel = grads[i].numel();
    table.push_back(d);
  }
  const auto t = upload(table, grads[0].device());
  const auto f32 = grads[0].options().dtype(at::kFloat);
  at::Tensor partials = at::empty({std::max<int64_t>(t.num_chunks, 1)}, f32), out = at::empty({2}, f32);
  const auto stream = at::cuda::getCurrentCUDAStream();
  LLMTRAIN_CUDA_CHECK(kernels::launch_grad_sumsq(t.tensors, t.chunks, t.num_chunks,
                                                 kernel_dtype(grads[0], "optimizer kernels: gradients"),
                                                 partials.data_ptr<float>(), stream));
  LLMTRAIN_CUDA_CHECK(kernels::launch_grad_norm_finish(partials.data_ptr<float>(), t.num_chunks, float(inv_scale),
                                                       float(max_norm), out.data_ptr<float>(), stream));
  return out;
}

void adamw_step(const std::vector<at::Tensor>& masters, const std::vector<at::Tensor>& grads,
                const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                const std::vector<at::Tensor>& params, const std::vector<double>& weight_decays, const AdamWHyper& h,
                const at::Tensor& norm_scale) {
  std::vector<kernels::AdamWTensor> table;       // float32 moments
  std::vector<kernels::AdamW8bitTensor> table8;  // 8-bit moments
  for (size_t i = 0; i < masters.size(); ++i) {
    check_contiguous(masters[i], "masters", i);
    check_contiguous(grads[i], "grads", i);
    LLMTRAIN_CHECK(grads[i].scalar_type() == grads[0].scalar_type(), "adamw_step: grads[", i, "] is ",
                   grads[i].scalar_type(), ", grads[0] ", grads[0].scalar_type());
    void* param = nullptr;
    if (!params.empty()) {
      check_contiguous(params[i], "params", i);
      param = params[i].data_ptr();
    }
    const int64_t n = masters[i].numel();
    auto* m = static_cast<uint8_t*>(state_pointer(exp_avgs[i], i));
    auto* v = static_cast<uint8_t*>(state_pointer(exp_avg_sqs[i], i));
    if (exp_avgs[i].scalar_type() == at::kByte) {
      const int64_t codes = adamw8bit_bytes(n) - n;  // the codes follow the absmaxes (ops/adamw.h)
      table8.push_back({masters[i].data_ptr<float>(), param, grads[i].data_ptr(), m + codes,
                        reinterpret_cast<float*>(m), v + codes, reinterpret_cast<float*>(v), n,
                        float(1 - h.lr * weight_decays[i]), round_key(h, i)});
    } else {
      kernels::AdamWTensor d{};
      d.master = masters[i].data_ptr<float>();
      d.grad = grads[i].data_ptr();
      d.exp_avg = reinterpret_cast<float*>(m);
      d.exp_avg_sq = reinterpret_cast<float*>(v);
      d.numel = n;
      d.weight_decay = float(weight_decays[i]);
      d.round_key = round_key(h, i);
      d.param = param;
      table.push_back(d);
    }
  }
  LLMTRAIN_CHECK(norm_scale.is_cuda() && norm_scale.scalar_type() == at::kFloat && norm_scale.is_contiguous(),
                 "adamw_step: norm_scale must be a contiguous float32 CUDA tensor");
  const double bc1 = 1 - std::pow(h.beta1, double(h.step)), bc2 = 1 - std::pow(h.beta2, double(h.step));
  const auto stream = at::cuda::getCurrentCUDAStream();
  const auto dtype = kernel_dtype(grads[0], "optimizer kernels: gradients");
  const float* scale = norm_scale.data_ptr<float>() + 1;
  const at::Device device = masters[0].device();
  if (!table.empty()) {
    const auto t = upload(table, device);
    LLMTRAIN_CUDA_CHECK(kernels::launch_adamw(t.tensors, t.chunks, t.num_chunks, dtype, float(h.lr), float(h.beta1),
                                              float(h.beta2), float(h.eps), float(bc1), float(bc2), scale,
                                              h.stochastic_rounding, stream));
  }
  if (!table8.empty()) {
    const auto t = upload(table8, device);
    const kernels::AdamW8bitMaps maps{detail::table_on(dynamic_map(true), device).data_ptr<float>(),
                                      detail::midpoints_on(dynamic_map(true), device).data_ptr<float>(),
                                      detail::table_on(dynamic_map(false), device).data_ptr<float>(),
                                      detail::midpoints_on(dynamic_map(false), device).data_ptr<float>()};
    const kernels::AdamW8bitStep step{float(h.beta1), float(1 - h.beta1), float(h.beta2),       float(1 - h.beta2),
                                      float(h.eps),   float(h.lr / bc1),  float(std::sqrt(bc2))};
    LLMTRAIN_CUDA_CHECK(kernels::launch_adamw8bit(t.tensors, t.chunks, t.num_chunks, dtype, maps, step, scale,
                                                  h.stochastic_rounding, stream));
  }
}

}  // namespace llmtrain::ops::cuda
