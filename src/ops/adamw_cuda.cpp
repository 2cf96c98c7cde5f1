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

namespace llmtrain::ops::cuda {
namespace {

// The descriptors and chunks of `tensors`, on the device: (tensors, chunks, number of chunks).
struct Table {
  at::Tensor blob;  // keeps the device copy alive for the launches on this stream
  const kernels::AdamWTensor* tensors;
  const kernels::AdamWChunk* chunks;
  int64_t num_chunks;
};

Table upload(const std::vector<kernels::AdamWTensor>& tensors, const at::Device& device) {
  std::vector<kernels::AdamWChunk> chunks;
  for (size_t i = 0; i < tensors.size(); ++i)
    for (int64_t s = 0; s < tensors[i].numel; s += kernels::kAdamWChunk) chunks.push_back({int64_t(i), s});
  const size_t tbytes = tensors.size() * sizeof(kernels::AdamWTensor),
               cbytes = chunks.size() * sizeof(kernels::AdamWChunk);
  at::Tensor host = at::empty({int64_t(tbytes + cbytes)}, at::TensorOptions().dtype(at::kByte).pinned_memory(true));
  std::memcpy(host.data_ptr(), tensors.data(), tbytes);
  std::memcpy(static_cast<char*>(host.data_ptr()) + tbytes, chunks.data(), cbytes);
  Table t;
  t.blob = host.to(device, /*non_blocking=*/true);
  const char* base = static_cast<const char*>(t.blob.data_ptr());
  t.tensors = reinterpret_cast<const kernels::AdamWTensor*>(base);
  t.chunks = reinterpret_cast<const kernels::AdamWChunk*>(base + tbytes);
  t.num_chunks = int64_t(chunks.size());
  return t;
}

void check_contiguous(const at::Tensor& t, const char* name, size_t i) {
  LLMTRAIN_CHECK(t.is_contiguous() && t.is_cuda(), "optimizer kernels: ", name, "[", i,
                 "] must be a contiguous CUDA tensor");
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
  const Table t = upload(table, grads[0].device());
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
  std::vector<kernels::AdamWTensor> table;
  for (size_t i = 0; i < masters.size(); ++i) {
    check_contiguous(masters[i], "masters", i);
    check_contiguous(grads[i], "grads", i);
    check_contiguous(exp_avgs[i], "exp_avgs", i);
    check_contiguous(exp_avg_sqs[i], "exp_avg_sqs", i);
    LLMTRAIN_CHECK(grads[i].scalar_type() == grads[0].scalar_type(), "adamw_step: grads[", i, "] is ",
                   grads[i].scalar_type(), ", grads[0] ", grads[0].scalar_type());
    kernels::AdamWTensor d{};
    d.master = masters[i].data_ptr<float>();
    d.grad = grads[i].data_ptr();
    d.exp_avg = exp_avgs[i].data_ptr<float>();
    d.exp_avg_sq = exp_avg_sqs[i].data_ptr<float>();
    d.numel = masters[i].numel();
    d.weight_decay = float(weight_decays[i]);
    d.round_key = round_key(h, i);
    if (!params.empty()) {
      check_contiguous(params[i], "params", i);
      d.param = params[i].data_ptr();
    }
    table.push_back(d);
  }
  LLMTRAIN_CHECK(norm_scale.is_cuda() && norm_scale.scalar_type() == at::kFloat && norm_scale.is_contiguous(),
                 "adamw_step: norm_scale must be a contiguous float32 CUDA tensor");
  const Table t = upload(table, masters[0].device());
  const double bc1 = 1 - std::pow(h.beta1, double(h.step)), bc2 = 1 - std::pow(h.beta2, double(h.step));
  LLMTRAIN_CUDA_CHECK(
      kernels::launch_adamw(t.tensors, t.chunks, t.num_chunks, kernel_dtype(grads[0], "optimizer kernels: gradients"),
                            float(h.lr), float(h.beta1), float(h.beta2), float(h.eps), float(bc1), float(bc2),
                            norm_scale.data_ptr<float>() + 1, h.stochastic_rounding, at::cuda::getCurrentCUDAStream()));
}

}  // namespace llmtrain::ops::cuda
