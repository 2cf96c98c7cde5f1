#include "llmtrain/core/host_copy.h"

#include <c10/core/impl/VirtualGuardImpl.h>

#include "llmtrain/core/error.h"

namespace llmtrain {

HostCopy::HostCopy(const torch::Tensor& src) {
  LLMTRAIN_CHECK(src.defined(), "HostCopy: the tensor to copy is undefined");
  if (src.device().is_cpu()) {
    host_ = src.detach().clone();
    return;
  }
  host_ = torch::empty(src.sizes(), src.options().device(torch::kCPU).pinned_memory(true));
  host_.copy_(src.detach(), /*non_blocking=*/true);
  done_.emplace(src.device().type());
  done_->record(c10::impl::VirtualGuardImpl(src.device().type()).getStream(src.device()));
}

const torch::Tensor& HostCopy::get() {
  LLMTRAIN_CHECK(defined(), "HostCopy: nothing was copied");
  if (done_) {
    done_->synchronize();
    done_.reset();
  }
  return host_;
}

}  // namespace llmtrain
