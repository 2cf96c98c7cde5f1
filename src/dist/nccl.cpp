// NcclCommunicator. Without LLMTRAIN_CUDA, create() says so; with it, the rest of this file. The unique
// id (128 bytes) travels as 16 int64 over the bootstrap's broadcast. Every collective: an event on the
// caller's stream that the communicator's stream waits for, the NCCL call, and (but for the started
// averages) an event that the caller's stream waits for in turn, so the caller sees stream order and
// the host never blocks.
// A watchdog thread marks each collective's end with an event and polls them and
// ncclCommGetAsyncError; a collective unfinished after the timeout (a rank gone or stuck) or an
// asynchronous error ends the run, as abort() does, instead of leaving the host waiting forever.
#include "llmtrain/dist/nccl.h"

#include <cstdlib>
#include <utility>

#include "llmtrain/config.h"  // LLMTRAIN_WITH_CUDA
#include "llmtrain/core/error.h"

#if !LLMTRAIN_WITH_CUDA
// No communicator can be made, so no other member is ever called; they are defined so that code naming
// the class (a dynamic_cast, the tests) builds alike with and without CUDA.
namespace llmtrain::dist {
namespace {

[[noreturn]] void no_cuda() { throw Error("NcclCommunicator: llmtrain was built without CUDA"); }

}  // namespace

struct NcclCommunicator::State {};

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(std::shared_ptr<Communicator>, torch::Device,
                                                           std::chrono::milliseconds) {
  no_cuda();
}
NcclCommunicator::NcclCommunicator(int rank, int size, std::unique_ptr<State> state)
    : rank_(rank), size_(size), s_(std::move(state)) {}
NcclCommunicator::~NcclCommunicator() = default;
void NcclCommunicator::all_reduce_sum(torch::Tensor&) { no_cuda(); }
void NcclCommunicator::all_reduce_avg(torch::Tensor&) { no_cuda(); }
void NcclCommunicator::reduce_scatter_sum(const torch::Tensor&, torch::Tensor&) { no_cuda(); }
void NcclCommunicator::all_gather(const torch::Tensor&, torch::Tensor&) { no_cuda(); }
void NcclCommunicator::broadcast(torch::Tensor&, int) { no_cuda(); }
void NcclCommunicator::barrier() { no_cuda(); }
void NcclCommunicator::start_all_reduce_avg(torch::Tensor&) { no_cuda(); }
void NcclCommunicator::start_reduce_scatter_avg(const torch::Tensor&, torch::Tensor&) { no_cuda(); }
void NcclCommunicator::wait() { no_cuda(); }
void NcclCommunicator::abort(int code) { std::_Exit(code); }

}  // namespace llmtrain::dist
#else
#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <nccl.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "check.h"

namespace llmtrain::dist {
namespace {

void check_nccl(ncclResult_t r, const char* what) {
  LLMTRAIN_CHECK(r == ncclSuccess, "NCCL: ", what, " failed: ", ncclGetErrorString(r), " (", ncclGetLastError(nullptr),
                 ")");
}

ncclDataType_t nccl_type(const torch::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case torch::kFloat: return ncclFloat32;
    case torch::kDouble: return ncclFloat64;
    case torch::kBFloat16: return ncclBfloat16;
    case torch::kHalf: return ncclFloat16;
    case torch::kLong: return ncclInt64;
    case torch::kInt: return ncclInt32;
    case torch::kByte: return ncclUint8;
    default: LLMTRAIN_CHECK(false, "NcclCommunicator::", what, ": no NCCL type for ", t.scalar_type());
  }
  return ncclFloat32;
}

}  // namespace

struct NcclCommunicator::State {
  std::shared_ptr<Communicator> bootstrap;
  torch::Device device{torch::kCUDA, 0};
  ncclComm_t comm = nullptr;
  std::optional<at::cuda::CUDAStream> stream;
  bool started = false;  // averages started since the last wait()
  std::chrono::milliseconds timeout{600000};

  // The watchdog's view: the collectives queued and not yet seen to end, oldest first.
  struct Pending {
    cudaEvent_t done;
    std::chrono::steady_clock::time_point queued;
    const char* what;
  };
  std::mutex mutex;
  std::condition_variable wake;
  std::deque<Pending> pending;
  std::vector<cudaEvent_t> spare;  // events whose collective has ended, for reuse
  bool stop = false;
  std::thread watchdog;

  // Ends the run from the watchdog: says why, aborts the NCCL communicator (bounded: a wedged abort
  // must not keep the process alive), then the bootstrap's abort ends every rank.
  [[noreturn]] void fail(const std::string& why) {
    std::fprintf(stderr, "rank %d: %s; ending every rank\n", bootstrap ? bootstrap->rank() : 0, why.c_str());
    std::fflush(stderr);
    std::thread([c = comm] { ncclCommAbort(c); }).detach();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (bootstrap) bootstrap->abort(1);
    std::_Exit(1);
  }

  void watch() {
    std::unique_lock<std::mutex> lock(mutex);
    while (!stop) {
      wake.wait_for(lock, std::chrono::milliseconds(100));
      if (stop) break;
      ncclResult_t async = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &async) == ncclSuccess && async != ncclSuccess && async != ncclInProgress)
        fail(std::string("NCCL reported an asynchronous error: ") + ncclGetErrorString(async));
      while (!pending.empty()) {
        const cudaError_t q = cudaEventQuery(pending.front().done);
        if (q == cudaErrorNotReady) break;
        if (q != cudaSuccess)
          fail(std::string("CUDA failed under NCCL ") + pending.front().what + ": " + cudaGetErrorString(q));
        spare.push_back(pending.front().done);
        pending.pop_front();
      }
      if (!pending.empty() && std::chrono::steady_clock::now() - pending.front().queued > timeout)
        fail(std::string("NCCL ") + pending.front().what + " did not finish within " +
             std::to_string(std::chrono::duration_cast<std::chrono::seconds>(timeout).count()) +
             " s: a rank is gone or stuck (LLMTRAIN_DIST_TIMEOUT sets the wait)");
    }
  }

  // Hands the collective just queued on `stream` to the watchdog.
  void watch_last(const char* what) {
    std::lock_guard<std::mutex> lock(mutex);
    cudaEvent_t done = nullptr;
    if (spare.empty()) {
      LLMTRAIN_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming) == cudaSuccess,
                     "NcclCommunicator: cannot create a CUDA event");
    } else {
      done = spare.back();
      spare.pop_back();
    }
    LLMTRAIN_CHECK(cudaEventRecord(done, stream->stream()) == cudaSuccess, "NcclCommunicator::", what,
                   ": cannot record a CUDA event");
    pending.push_back({done, std::chrono::steady_clock::now(), what});
  }

  // Runs call(stream) after the caller's queued work; `through` copies CPU tensors to the device and
  // back. With `join`, the caller's stream then waits for it.
  template <typename F>
  void run(const char* what, std::initializer_list<torch::Tensor*> tensors, bool join, F&& call) {
    c10::cuda::CUDAGuard guard(device);
    for (torch::Tensor* t : tensors) {
      LLMTRAIN_CHECK(t->is_contiguous(), "NcclCommunicator::", what, ": the tensor must be contiguous");
      LLMTRAIN_CHECK(t->is_cpu() || t->device() == device, "NcclCommunicator::", what, ": the tensor is on ",
                     t->device(), ", this rank's GPU is ", device);
    }
    std::vector<torch::Tensor> staged;
    for (torch::Tensor* t : tensors) staged.push_back(t->is_cpu() ? t->to(device) : *t);
    const auto caller = at::cuda::getCurrentCUDAStream(device.index());
    at::cuda::CUDAEvent ready;
    ready.record(caller);
    ready.block(*stream);
    call(staged, stream->stream());
    watch_last(what);
    for (auto& t : staged) t.record_stream(*stream);
    if (join) {
      at::cuda::CUDAEvent done;
      done.record(*stream);
      done.block(caller);
    }
    size_t i = 0;
    for (torch::Tensor* t : tensors) {
      if (t->is_cpu()) t->copy_(staged[i]);  // waits: after the join
      ++i;
    }
  }
};

NcclCommunicator::NcclCommunicator(int rank, int size, std::unique_ptr<State> state)
    : rank_(rank), size_(size), s_(std::move(state)) {}

NcclCommunicator::~NcclCommunicator() {
  if (!s_) return;
  {
    std::lock_guard<std::mutex> lock(s_->mutex);
    s_->stop = true;
  }
  s_->wake.notify_all();
  if (s_->watchdog.joinable()) s_->watchdog.join();
  for (const auto& p : s_->pending) cudaEventDestroy(p.done);
  for (cudaEvent_t e : s_->spare) cudaEventDestroy(e);
  if (s_->comm) ncclCommDestroy(s_->comm);
}

std::shared_ptr<NcclCommunicator> NcclCommunicator::create(std::shared_ptr<Communicator> bootstrap,
                                                           torch::Device device, std::chrono::milliseconds timeout) {
  LLMTRAIN_CHECK(device.is_cuda() && device.has_index(), "NcclCommunicator: needs a CUDA device with an index, got ",
                 device);
  const int rank = bootstrap ? bootstrap->rank() : 0, size = bootstrap ? bootstrap->world_size() : 1;
  auto s = std::make_unique<State>();
  LLMTRAIN_CHECK(timeout.count() > 0, "NcclCommunicator: the timeout must be above 0, got ", timeout.count(), " ms");
  s->bootstrap = bootstrap;
  s->device = device;
  s->timeout = timeout;
  c10::cuda::set_device(device.index());
  c10::cuda::CUDAGuard guard(device);
  ncclUniqueId id;
  static_assert(sizeof(id) % 8 == 0, "the NCCL id travels as int64");
  if (rank == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (size > 1) {
    torch::Tensor wire = torch::zeros({int64_t(sizeof(id) / 8)}, torch::kLong);
    if (rank == 0) std::memcpy(wire.data_ptr(), &id, sizeof(id));
    bootstrap->broadcast(wire, 0);
    std::memcpy(&id, wire.data_ptr(), sizeof(id));
  }
  check_nccl(ncclCommInitRank(&s->comm, size, id, rank), "ncclCommInitRank");
  s->stream = at::cuda::getStreamFromPool(/*isHighPriority=*/true, device.index());
  State* state = s.get();
  state->watchdog = std::thread([state, device] {
    c10::cuda::CUDAGuard guard(device);
    state->watch();
  });
  return std::shared_ptr<NcclCommunicator>(new NcclCommunicator(rank, size, std::move(s)));
}

void NcclCommunicator::all_reduce_sum(torch::Tensor& t) {
  s_->run("all_reduce_sum", {&t}, true, [&](std::vector<torch::Tensor>& x, cudaStream_t st) {
    check_nccl(ncclAllReduce(x[0].data_ptr(), x[0].data_ptr(), size_t(x[0].numel()), nccl_type(x[0], "all_reduce_sum"),
                             ncclSum, s_->comm, st),
               "ncclAllReduce");
  });
}

void NcclCommunicator::all_reduce_avg(torch::Tensor& t) {
  s_->run("all_reduce_avg", {&t}, true, [&](std::vector<torch::Tensor>& x, cudaStream_t st) {
    check_nccl(ncclAllReduce(x[0].data_ptr(), x[0].data_ptr(), size_t(x[0].numel()), nccl_type(x[0], "all_reduce_avg"),
                             ncclAvg, s_->comm, st),
               "ncclAllReduce");
  });
}

void NcclCommunicator::start_all_reduce_avg(torch::Tensor& t) {
  LLMTRAIN_CHECK(t.is_cuda(), "NcclCommunicator::start_all_reduce_avg: takes CUDA tensors, got one on ", t.device());
  s_->run("start_all_reduce_avg", {&t}, false, [&](std::vector<torch::Tensor>& x, cudaStream_t st) {
    check_nccl(ncclAllReduce(x[0].data_ptr(), x[0].data_ptr(), size_t(x[0].numel()),
                             nccl_type(x[0], "start_all_reduce_avg"), ncclAvg, s_->comm, st),
               "ncclAllReduce");
  });
  s_->started = true;
}

void NcclCommunicator::start_reduce_scatter_avg(const torch::Tensor& input, torch::Tensor& output) {
  detail::check_parts("start_reduce_scatter_avg", input, output, size_);
  LLMTRAIN_CHECK(input.is_cuda() && output.is_cuda(), "NcclCommunicator::start_reduce_scatter_avg: takes CUDA tensors");
  torch::Tensor in = input;
  s_->run("start_reduce_scatter_avg", {&in, &output}, false, [&](std::vector<torch::Tensor>& x, cudaStream_t st) {
    check_nccl(ncclReduceScatter(x[0].data_ptr(), x[1].data_ptr(), size_t(x[1].numel()),
                                 nccl_type(x[1], "start_reduce_scatter_avg"), ncclAvg, s_->comm, st),
               "ncclReduceScatter");
  });
  s_->started = true;
}

void NcclCommunicator::wait() {
  if (!s_->started) return;
  c10::cuda::CUDAGuard guard(s_->device);
  at::cuda::CUDAEvent done;
  done.record(*s_->stream);
  done.block(at::cuda::getCurrentCUDAStream(s_->device.index()));
  s_->started = false;
}

void NcclCommunicator::reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) {
  detail::check_parts("reduce_scatter_sum", input, output, size_);
  torch::Tensor in = input;
  s_->run("reduce_scatter_sum", {&in, &output}, true, [&](std::vector<torch::Tensor>& x, cudaStream_t st) {
    check_nccl(ncclReduceScatter(x[0].data_ptr(), x[1].data_ptr(), size_t(x[1].numel()),
                                 nccl_type(x[1], "reduce_scatter_sum"), ncclSum, s_->comm, st),
               "ncclReduceScatter");
  });
}

void NcclCommunicator::all_gather(const torch::Tensor& input, torch::Tensor& output) {
  detail::check_parts("all_gather", output, input, size_);
  torch::Tensor in = input;
  s_->run("all_gather", {&in, &output}, true, [&](std::vector<torch::Tensor>& x, cudaStream_t st) {
    check_nccl(ncclAllGather(x[0].data_ptr(), x[1].data_ptr(), size_t(x[0].numel()), nccl_type(x[0], "all_gather"),
                             s_->comm, st),
               "ncclAllGather");
  });
}

void NcclCommunicator::broadcast(torch::Tensor& t, int root) {
  LLMTRAIN_CHECK(root >= 0 && root < size_, "NcclCommunicator::broadcast: root ", root, " is not a rank of ", size_);
  s_->run("broadcast", {&t}, true, [&](std::vector<torch::Tensor>& x, cudaStream_t st) {
    check_nccl(ncclBroadcast(x[0].data_ptr(), x[0].data_ptr(), size_t(x[0].numel()), nccl_type(x[0], "broadcast"), root,
                             s_->comm, st),
               "ncclBroadcast");
  });
}

void NcclCommunicator::barrier() {
  torch::Tensor one = torch::ones({1}, torch::TensorOptions().device(s_->device));
  all_reduce_sum(one);
  (void)one.item<float>();  // the host waits for every rank's part
}

void NcclCommunicator::abort(int code) {
  {
    std::lock_guard<std::mutex> lock(s_->mutex);
    s_->stop = true;
  }
  s_->wake.notify_all();
  if (s_->watchdog.joinable()) s_->watchdog.join();
  if (s_->comm) ncclCommAbort(s_->comm);
  s_->comm = nullptr;
  if (s_->bootstrap) s_->bootstrap->abort(code);
  std::_Exit(code);
}

}  // namespace llmtrain::dist
#endif  // LLMTRAIN_WITH_CUDA
