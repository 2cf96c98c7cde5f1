// ops::grad_norm_scale's and ops::adamw_step's CUDA path: the multi-tensor kernels.
#pragma once

#include <vector>

#include "cuda_common.h"
#include "llmtrain/ops/adamw.h"

namespace llmtrain::ops::cuda {

/// ops::grad_norm_scale and ops::adamw_step on the multi-tensor kernels (arguments already checked for
/// counts, shapes and devices; contiguity and dtypes are checked here).
at::Tensor grad_norm_scale(const std::vector<at::Tensor>& grads, double inv_scale, double max_norm);
void adamw_step(const std::vector<at::Tensor>& masters, const std::vector<at::Tensor>& grads,
                const std::vector<at::Tensor>& exp_avgs, const std::vector<at::Tensor>& exp_avg_sqs,
                const std::vector<at::Tensor>& params, const std::vector<double>& weight_decays,
                const AdamWHyper& hyper, const at::Tensor& norm_scale);

}  // namespace llmtrain::ops::cuda
