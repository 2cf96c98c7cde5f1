// The embedding's glue: the kernels behind an autograd function (forward keeps only the ids; backward
// sorts them stably with ATen and hands the kernels the order), and the device record of IdCheck.
#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <torch/autograd.h>

#include <cstring>

#include "embedding_cuda.h"
#include "kernels/embedding.cuh"
#include "llmtrain/core/cuda_check.h"
#include "llmtrain/core/error.h"

namespace llmtrain::ops::cuda {

// ---- BadIdRecord --------------------------------------------------------------------------------

struct BadIdRecord::State {
  at::Tensor dev, host;  // (4) int64 each: a kernels::BadId; host in pinned memory
  at::cuda::CUDAEvent copied;
  bool pending = false;
  bool graphed = false;  // checks were captured into a CUDA graph: each replay may have filled the record
};

BadIdRecord::BadIdRecord(const at::Device& device) : device_(device), s_(std::make_unique<State>()) {
  static_assert(sizeof(kernels::BadId) == 4 * sizeof(int64_t));
  const auto opts = at::TensorOptions().dtype(at::kLong);
  s_->dev = at::zeros({4}, opts.device(device));
  s_->host = at::zeros({4}, opts.pinned_memory(true));
}

BadIdRecord::~BadIdRecord() = default;

kernels::BadId* BadIdRecord::device_record() { return reinterpret_cast<kernels::BadId*>(s_->dev.data_ptr<int64_t>()); }

namespace {
bool capturing(const at::cuda::CUDAStream& stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  LLMTRAIN_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  return capture != cudaStreamCaptureStatusNone;
}
}  // namespace

void BadIdRecord::queued() {
  const auto stream = at::cuda::getCurrentCUDAStream(device_.index());
  if (capturing(stream)) {  // an event recorded in a graph cannot be waited on outside it
    s_->graphed = true;
    return;
  }
  LLMTRAIN_CUDA_CHECK(
      cudaMemcpyAsync(s_->host.data_ptr(), s_->dev.data_ptr(), sizeof(kernels::BadId), cudaMemcpyDeviceToHost, stream));
  s_->copied.record(stream);
  s_->pending = true;
}

std::optional<kernels::BadId> BadIdRecord::take(bool wait) {
  if (capturing(at::cuda::getCurrentCUDAStream(device_.index()))) return std::nullopt;  // no events may be read
  if (!s_->pending && s_->graphed) {  // what the graphs' replays so far found, copied back from here
    const c10::cuda::CUDAGuard guard(device_);
    queued();
  }
  if (!s_->pending) return std::nullopt;
  if (wait) s_->copied.synchronize();
  else if (!s_->copied.query()) return std::nullopt;
  s_->pending = false;
  kernels::BadId bad;
  std::memcpy(&bad, s_->host.data_ptr(), sizeof bad);
  if (bad.found == 0) return std::nullopt;
  std::memset(s_->host.data_ptr(), 0, sizeof bad);
  const c10::cuda::CUDAGuard guard(device_);
  s_->dev.zero_();  // in stream order, after the checks that filled it
  return bad;
}

void check_ids(const at::Tensor& ids_in, int64_t num_ids, std::optional<int64_t> ignore_index, BadIdRecord& record,
               int64_t tag) {
  const at::Tensor ids = ids_in.contiguous();
  const c10::cuda::CUDAGuard guard(ids.device());
  LLMTRAIN_CUDA_CHECK(kernels::launch_check_ids(ids.data_ptr<int64_t>(), ids.numel(), num_ids, ignore_index.has_value(),
                                                ignore_index.value_or(0), record.device_record(), tag,
                                                at::cuda::getCurrentCUDAStream()));
  record.queued();
}

// ---- embedding ----------------------------------------------------------------------------------

namespace {

struct EmbeddingFn : torch::autograd::Function<EmbeddingFn> {
  static at::Tensor forward(torch::autograd::AutogradContext* ctx, const at::Tensor& idx_in,  // (B, T) int64
                            const at::Tensor& wte_in, const at::Tensor& wpe_in,               // (V, C), (>= T, C)
                            const at::Tensor* start_in,  // (B) int64, or null; not a tensor argument: no gradient
                            int64_t num_ids, BadIdRecord* record, int64_t tag) {
    const at::Tensor idx = idx_in.contiguous(), wte = packed(wte_in), wpe = packed(wpe_in);
    const at::Tensor start = start_in ? start_in->contiguous() : at::Tensor();
    const int64_t B = idx.size(0), T = idx.size(1), C = wte.size(1);
    at::Tensor out = at::empty({B, T, C}, wte.options());  // (B, T, C)
    LLMTRAIN_CUDA_CHECK(kernels::launch_embedding_fwd(
        idx.data_ptr<int64_t>(), wte.data_ptr(), wpe.data_ptr(), start.defined() ? start.data_ptr<int64_t>() : nullptr,
        wpe.size(0), kernel_dtype(wte, "embedding: wte"), B * T, T, C, num_ids, out.data_ptr(), record->device_record(),
        tag, at::cuda::getCurrentCUDAStream()));
    record->queued();
    ctx->save_for_backward({idx});
    ctx->saved_data["wte_rows"] = wte.size(0);
    ctx->saved_data["wpe_rows"] = wpe.size(0);
    return out;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const at::Tensor idx = ctx->get_saved_variables()[0];
    const at::Tensor dout = packed(grads[0]);  // (B, T, C)
    const int64_t N = idx.numel(), T = idx.size(1), C = dout.size(2);
    const int64_t rows = ctx->saved_data["wte_rows"].toInt();
    const auto [sorted, order] = at::sort(idx.flatten(), /*stable=*/true, /*dim=*/0, /*descending=*/false);
    at::Tensor dwte = at::zeros({rows, C}, dout.options());
    at::Tensor dwpe = at::zeros({ctx->saved_data["wpe_rows"].toInt(), C}, dout.options());
    const int64_t tiles = kernels::embedding_bwd_tiles(N);
    const auto f32 = dout.options().dtype(at::kFloat);
    at::Tensor head = at::empty({tiles, C}, f32), tail = at::empty({tiles, C}, f32);  // scratch rows
    LLMTRAIN_CUDA_CHECK(kernels::launch_embedding_bwd(
        dout.data_ptr(), sorted.data_ptr<int64_t>(), order.data_ptr<int64_t>(), kernel_dtype(dout, "embedding: grad"),
        N, T, C, rows, head.data_ptr<float>(), tail.data_ptr<float>(), dwte.data_ptr(), dwpe.data_ptr(),
        at::cuda::getCurrentCUDAStream()));
    return {at::Tensor(), dwte, dwpe, at::Tensor(), at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

bool embedding_supported(const at::Tensor& idx, const at::Tensor& wte, const at::Tensor& wpe) {
  const auto t = wte.scalar_type();
  return idx.is_cuda() && wte.is_cuda() && wpe.is_cuda() && idx.scalar_type() == at::kLong &&
         (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf) && wpe.scalar_type() == t;
}

at::Tensor embedding(const at::Tensor& idx, const at::Tensor& wte, const at::Tensor& wpe, const at::Tensor& start,
                     int64_t num_ids, BadIdRecord& record, int64_t tag) {
  return EmbeddingFn::apply(idx, wte, wpe, start.defined() ? &start : nullptr, num_ids, &record, tag);
}

}  // namespace llmtrain::ops::cuda
