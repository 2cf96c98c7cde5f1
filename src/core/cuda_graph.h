// Capturing work as CUDA graphs (train::GraphedStep, infer::Generator). Capture runs on a side stream
// of its own, since graphs cannot be captured on the legacy default stream, ordered after the work
// queued so far on the caller's stream and before what the caller queues next. CUDA builds only.
#pragma once

#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include <exception>
#include <optional>
#include <string>

#include "llmtrain/core/error.h"

namespace llmtrain::detail {

/// A stream of one's own for work that must not run on the caller's (eager warm-ups, captures).
///   SideStream side;  auto y = side.run([&] { return f(x); });
class SideStream {
 public:
  /// f() on the side stream, after the work queued on the current stream and before what follows it.
  template <typename F>
  auto run(F&& f) -> decltype(f()) {
    const auto ambient = at::cuda::getCurrentCUDAStream();
    if (!side_) side_ = c10::cuda::getStreamFromPool(/*isHighPriority=*/false, ambient.device_index());
    at::cuda::CUDAEvent ready;
    ready.record(ambient);
    ready.block(*side_);
    struct Join {  // the caller's stream waits for the side stream however f() ends
      c10::cuda::CUDAStream side, ambient;
      ~Join() {
        at::cuda::CUDAEvent done;
        done.record(side);
        done.block(ambient);
      }
    } join{*side_, ambient};
    const c10::cuda::CUDAStreamGuard guard(*side_);
    return f();
  }

 private:
  std::optional<c10::cuda::CUDAStream> side_;
};

/// Captures f() into `graph` (memory from `pool`; {0, 0}: a new pool) on `side` and returns what f
/// returned, whose memory the replays rewrite. A failed capture ends the stream's capture and throws
/// llmtrain::Error: "`what` cannot be captured as a CUDA graph (why); `hint`". The capture forbids
/// unsafe calls (host waits and the like) on this thread only: the data loader's thread takes pinned
/// host memory meanwhile, whose allocator queries events, and a global capture ended on that at random.
template <typename F>
auto capture_graph(SideStream& side, at::cuda::CUDAGraph& graph, at::cuda::MempoolId_t pool, const char* what,
                   const char* hint, F&& f) -> decltype(f()) {
  return side.run([&] {
    graph.capture_begin(pool, cudaStreamCaptureModeThreadLocal);
    try {
      auto out = f();
      graph.capture_end();
      return out;
    } catch (const std::exception& e) {
      try {
        graph.capture_end();  // ends the stream's capture; the graph itself is invalid
      } catch (const std::exception&) {
      }
      LLMTRAIN_CHECK(false, what, " cannot be captured as a CUDA graph (", e.what(), "); ", hint);
      throw;  // not reached
    }
  });
}

}  // namespace llmtrain::detail
