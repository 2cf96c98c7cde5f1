// The embedding op and IdCheck. CPU ids are checked on the host at once; CUDA ids by the kernels of
// kernels/embedding.cu into a device record (cuda::BadIdRecord), whose verdict raise() reads back.
#include "llmtrain/ops/embedding.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <vector>

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/ops/dispatch.h"
#if LLMTRAIN_WITH_CUDA
#include "embedding_cuda.h"
#endif

namespace llmtrain::ops {

// What each check was of (a record's tag indexes this list), so that a late report can name it.
struct IdCheck::Impl {
  struct Checked {
    std::string what;
    int64_t num_ids;
    std::optional<int64_t> ignore_index;
    std::vector<int64_t> sizes;
  };
  std::vector<Checked> checked;
#if LLMTRAIN_WITH_CUDA
  std::unique_ptr<cuda::BadIdRecord> record;
#endif

  int64_t tag(const std::string& what, const at::Tensor& ids, int64_t num_ids, std::optional<int64_t> ignore) {
    const std::vector<int64_t> sizes(ids.sizes().begin(), ids.sizes().end());
    for (size_t i = 0; i < checked.size(); ++i) {
      const auto& c = checked[i];
      if (c.what == what && c.num_ids == num_ids && c.ignore_index == ignore && c.sizes == sizes) return int64_t(i);
    }
    checked.push_back({what, num_ids, ignore, sizes});
    return int64_t(checked.size()) - 1;
  }
};

namespace {

// "(1, 5)" for a flat index into a tensor of these sizes.
std::string position(int64_t flat, const std::vector<int64_t>& sizes) {
  std::vector<int64_t> at(sizes.size());
  for (size_t d = sizes.size(); d-- > 0;) {
    at[d] = sizes[d] > 0 ? flat % sizes[d] : 0;
    flat = sizes[d] > 0 ? flat / sizes[d] : 0;
  }
  std::string s = "(";
  for (size_t d = 0; d < at.size(); ++d) s += (d ? ", " : "") + std::to_string(at[d]);
  return s + ")";
}

[[noreturn]] void throw_bad(const std::string& owner, const std::string& what, int64_t value, const std::string& where,
                            int64_t num_ids, std::optional<int64_t> ignore) {
  detail::throw_error(detail::str_cat(owner, owner.empty() ? "" : ": ", what, " holds token id ", value, " at ", where,
                                      ", outside the vocabulary [0, ", num_ids, ")",
                                      ignore ? " (or " + std::to_string(*ignore) + " to ignore)" : std::string()));
}

}  // namespace

IdCheck::IdCheck(std::string owner) : owner_(std::move(owner)), impl_(std::make_unique<Impl>()) {}
IdCheck::~IdCheck() = default;
IdCheck::IdCheck(const IdCheck& other) : owner_(other.owner_), impl_(std::make_unique<Impl>()) {}
IdCheck& IdCheck::operator=(const IdCheck& other) {
  if (this != &other) {
    owner_ = other.owner_;
    impl_ = std::make_unique<Impl>();
  }
  return *this;
}

void IdCheck::check(const at::Tensor& ids, const std::string& what, int64_t num_ids,
                    std::optional<int64_t> ignore_index) {
  LLMTRAIN_CHECK(ids.scalar_type() == at::kLong, owner_, owner_.empty() ? "" : ": ", what, " must be int64, got ",
                 ids.scalar_type());
#if LLMTRAIN_WITH_CUDA
  if (ids.is_cuda()) {
    cuda::check_ids(ids, num_ids, ignore_index, record_on(ids.device()), impl_->tag(what, ids, num_ids, ignore_index));
    return;
  }
#endif
  if (ids.numel() == 0) return;
  at::Tensor bad = ids.lt(0).logical_or(ids.ge(num_ids));
  if (ignore_index) bad.logical_and_(ids.ne(*ignore_index));
  if (!bad.any().item<bool>()) return;
  const int64_t flat = bad.flatten().nonzero()[0][0].item<int64_t>();
  throw_bad(owner_, what, ids.flatten()[flat].item<int64_t>(),
            position(flat, std::vector<int64_t>(ids.sizes().begin(), ids.sizes().end())), num_ids, ignore_index);
}

void IdCheck::raise(bool wait) {
#if LLMTRAIN_WITH_CUDA
  if (!impl_->record) return;
  const auto bad = impl_->record->take(wait);
  if (!bad) return;
  const auto& c = impl_->checked.at(size_t(bad->tag));
  throw_bad(owner_, c.what, bad->value, position(bad->position, c.sizes), c.num_ids, c.ignore_index);
#else
  (void)wait;
#endif
}

#if LLMTRAIN_WITH_CUDA
cuda::BadIdRecord& IdCheck::record_on(const at::Device& device) {
  if (!impl_->record || impl_->record->device() != device) {
    if (impl_->record) raise(true);  // what the old device found, before its record goes
    impl_->record = std::make_unique<cuda::BadIdRecord>(device);
  }
  return *impl_->record;
}
#endif

at::Tensor embedding(const at::Tensor& idx, const at::Tensor& wte, const at::Tensor& wpe, int64_t num_ids,
                     IdCheck& check, const at::Tensor& start) {
  LLMTRAIN_CHECK(idx.dim() == 2, "embedding: idx must be (B, T), got ", idx.sizes());
  LLMTRAIN_CHECK(wte.dim() == 2 && wpe.dim() == 2 && wpe.size(1) == wte.size(1),
                 "embedding: wte (V, C) and wpe (T, C) ", "must share C, got ", wte.sizes(), " and ", wpe.sizes());
  LLMTRAIN_CHECK(idx.size(1) <= wpe.size(0), "embedding: sequence length ", idx.size(1), " exceeds the ", wpe.size(0),
                 " positions of wpe");
  const bool each = start.defined() && start.dim() == 2;  // every token's position given
  if (start.defined()) {
    LLMTRAIN_CHECK((start.dim() == 1 && start.size(0) == idx.size(0)) || (each && start.sizes() == idx.sizes()),
                   "embedding: start must be (", idx.size(0), ") or ", idx.sizes(), ", got ", start.sizes());
    LLMTRAIN_CHECK(start.scalar_type() == at::kLong && start.device() == idx.device(),
                   "embedding: start must be int64 on ", idx.device(), ", got ", start.scalar_type(), " on ",
                   start.device());
    LLMTRAIN_CHECK(each || !at::GradMode::is_enabled() || !(wte.requires_grad() || wpe.requires_grad()),
                   "embedding: offset positions (start) have no backward; call it under torch::NoGradGuard");
  }
  LLMTRAIN_CHECK(num_ids >= 1 && num_ids <= wte.size(0), "embedding: num_ids ", num_ids, " must lie in [1, ",
                 wte.size(0), "]");
  LLMTRAIN_CHECK(idx.device() == wte.device() && wpe.device() == wte.device(), "embedding: idx is on ", idx.device(),
                 ", wte on ", wte.device(), " and wpe on ", wpe.device());
#if LLMTRAIN_WITH_CUDA
  if (!each && cuda_kernel_enabled(Kernel::kEmbedding) && cuda::embedding_supported(idx, wte, wpe)) {
    auto& record = check.record_on(idx.device());
    return cuda::embedding(idx, wte, wpe, start, num_ids, record, check.impl_->tag("idx", idx, num_ids, std::nullopt));
  }
#endif
  check.check(idx, "idx", num_ids);
  if (idx.is_cuda()) check.raise(true);  // ATen's gather would hit a device-side assert on a bad id
  if (!start.defined()) return at::embedding(wte, idx) + wpe.narrow(0, 0, idx.size(1));
  const at::Tensor at_pos = each ? start : start.unsqueeze(1) + at::arange(idx.size(1), start.options());  // (B, T)
  if (!at_pos.is_cuda() && at_pos.numel() > 0)  // on CUDA the caller keeps them in range (no host wait)
    LLMTRAIN_CHECK(at_pos.min().item<int64_t>() >= 0 && at_pos.max().item<int64_t>() < wpe.size(0),
                   "embedding: start puts positions outside wpe's [0, ", wpe.size(0), ")");
  return at::embedding(wte, idx) + at::embedding(wpe, at_pos);
}

}  // namespace llmtrain::ops
