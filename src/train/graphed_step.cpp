// Capture runs on a side stream of its own (CUDA graphs cannot be captured on the legacy default
// stream), after one eager call there: cuBLAS's workspace and handles, cuDNN's plans and the autograd
// engine's threads are made then, not inside the capture. Replays run on the caller's stream, in order
// with the rest of its work. The first graph's gradients are allocated in its private memory pool and
// kept here; the second graph shares that pool and adds into them.
#include "llmtrain/train/graphed_step.h"

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"

#if LLMTRAIN_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>

#include "../core/cuda_graph.h"
#endif

namespace llmtrain::train {

struct GraphedStep::Impl {
  std::vector<torch::Tensor> params;
  Body body;
#if LLMTRAIN_WITH_CUDA
  struct Graph {
    int64_t calls = 0;
    std::unique_ptr<at::cuda::CUDAGraph> graph;
    torch::Tensor loss;  // written by each replay
  };
  Graph graphs[2];                   // [0]: a step's first micro-step; [1]: the later ones
  torch::Tensor inputs, targets;     // what the graphs read
  std::vector<torch::Tensor> grads;  // what they write (undefined for parameters without a gradient)
  detail::SideStream side;

  void capture(Graph& g, bool first) {
    g.graph = std::make_unique<at::cuda::CUDAGraph>();
    const at::cuda::MempoolId_t pool = first ? at::cuda::MempoolId_t{0, 0} : graphs[0].graph->pool();
    try {
      g.loss = detail::capture_graph(side, *g.graph, pool, "GraphedStep: the micro-step",
                                     "run it eagerly (train.cuda_graph=false)", [&] { return body(inputs, targets); });
    } catch (...) {
      g.graph.reset();
      throw;
    }
    if (first) {
      grads.clear();
      for (const auto& p : params) grads.push_back(p.grad());
    }
    // The eager warm-up's blocks, cached in the ordinary pool, are not needed again: give them back.
    c10::cuda::CUDACachingAllocator::emptyCache();
  }
#endif
};

GraphedStep::GraphedStep(std::vector<torch::Tensor> params, Body body) : impl_(std::make_unique<Impl>()) {
  impl_->params = std::move(params);
  impl_->body = std::move(body);
  LLMTRAIN_CHECK(impl_->body, "GraphedStep: the micro-step function is empty");
#if !LLMTRAIN_WITH_CUDA
  LLMTRAIN_CHECK(false, "GraphedStep: llmtrain was built without CUDA (LLMTRAIN_CUDA=OFF)");
#endif
}

GraphedStep::~GraphedStep() = default;

torch::Tensor GraphedStep::run(const torch::Tensor& inputs, const torch::Tensor& targets, bool first) {
#if LLMTRAIN_WITH_CUDA
  Impl& d = *impl_;
  LLMTRAIN_CHECK(inputs.is_cuda() && targets.device() == inputs.device(),
                 "GraphedStep: inputs and targets must be "
                 "on one CUDA device, got ",
                 inputs.device(), " and ", targets.device());
  if (first)
    for (size_t i = 0; i < d.params.size(); ++i)
      LLMTRAIN_CHECK(!d.params[i].grad().defined(), "GraphedStep: parameter ", i, " has a gradient at a step's first ",
                     "micro-step; zero the gradients (to undefined) first");
  const c10::cuda::CUDAGuard device(inputs.device());
  Impl::Graph& g = d.graphs[first ? 0 : 1];
  if (g.calls++ == 0 || (!first && !d.graphs[0].graph)) {  // eager, warming up the capture stream
    const auto loss = d.side.run([&] { return d.body(inputs, targets); });
    const auto ambient = at::cuda::getCurrentCUDAStream();  // where the caller goes on using them
    loss.record_stream(ambient);
    for (const auto& p : d.params)
      if (p.grad().defined()) p.grad().record_stream(ambient);
    return loss;
  }
  if (!d.inputs.defined()) {
    d.inputs = torch::empty_like(inputs, at::MemoryFormat::Contiguous);
    d.targets = torch::empty_like(targets, at::MemoryFormat::Contiguous);
  }
  LLMTRAIN_CHECK(inputs.sizes() == d.inputs.sizes() && targets.sizes() == d.targets.sizes() &&
                     inputs.scalar_type() == d.inputs.scalar_type() && targets.scalar_type() == d.targets.scalar_type(),
                 "GraphedStep: inputs ", inputs.sizes(), " and targets ", targets.sizes(), " differ from the ",
                 d.inputs.sizes(), " and ", d.targets.sizes(), " the graphs were captured with");
  d.inputs.copy_(inputs, /*non_blocking=*/true);
  d.targets.copy_(targets, /*non_blocking=*/true);
  if (!g.graph) d.capture(g, first);
  g.graph->replay();
  for (size_t i = 0; i < d.params.size(); ++i) d.params[i].mutable_grad() = d.grads[i];
  return g.loss;
#else
  (void)inputs;
  (void)targets;
  (void)first;
  LLMTRAIN_CHECK(false, "GraphedStep: llmtrain was built without CUDA");
#endif
}

}  // namespace llmtrain::train
