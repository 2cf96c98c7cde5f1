#include "llmtrain/ops/gelu.h"

#include <ATen/ATen.h>

namespace llmtrain::ops {

at::Tensor gelu(const at::Tensor& x) { return at::gelu(x, "tanh"); }

}  // namespace llmtrain::ops
