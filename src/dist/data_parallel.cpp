// Each parameter's post-accumulate hook counts its bucket down during a synced backward; a bucket at
// zero starts, and so does every bucket after it that is also complete, so the order of reductions is
// the bucket order on every rank whatever order the hooks fire in.
#include "llmtrain/dist/data_parallel.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "llmtrain/core/error.h"

namespace llmtrain::dist {

struct DataParallel::Impl {
  struct Bucket {
    torch::Tensor flat;
    int64_t members = 0;  // parameters whose gradients it holds
    int64_t pending = 0;  // members whose gradient of the synced backward is still to come
  };
  std::shared_ptr<Communicator> comm;
  std::vector<torch::Tensor> params, views;  // views[i]: params[i]'s slot in its bucket
  std::vector<size_t> bucket_of;
  std::vector<Bucket> buckets;
  bool sync = true;
  size_t next = 0;  // the first bucket not started
  int64_t started_early = 0;

  void start_ready() {
    while (next < buckets.size() && buckets[next].pending == 0) comm->start_all_reduce_avg(buckets[next++].flat);
  }

  // A gradient replaced behind our back (or reset) is brought back into its bucket.
  void adopt(size_t i) {
    torch::Tensor& p = params[i];
    if (p.grad().is_same(views[i])) return;
    torch::NoGradGuard no_grad;
    if (p.grad().defined()) views[i].copy_(p.grad());
    p.mutable_grad() = views[i];
  }

  void accumulated(size_t i) {
    if (!sync) return;
    adopt(i);
    Bucket& b = buckets[bucket_of[i]];
    LLMTRAIN_CHECK(b.pending > 0, "DataParallel: a parameter got two synced gradients; call finish() after the "
                   "backward of each set_sync(true)");
    if (--b.pending == 0) {
      const size_t before = next;
      start_ready();
      started_early += int64_t(next - before);
    }
  }

  struct Hook : torch::autograd::PostAccumulateGradHook {
    Hook(Impl* d, size_t i) : d(d), i(i) {}
    void operator()(const torch::autograd::Variable&) override { d->accumulated(i); }
    Impl* d;
    size_t i;
  };

  void reset_counts() {
    for (auto& b : buckets) b.pending = b.members;
    next = 0;
  }
};

DataParallel::DataParallel(const std::vector<torch::Tensor>& params, std::shared_ptr<Communicator> comm,
                           DataParallelOptions options)
    : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  LLMTRAIN_CHECK(comm != nullptr, "DataParallel: no communicator");
  LLMTRAIN_CHECK(options.bucket_bytes > 0, "DataParallel: bucket_bytes must be positive, got ", options.bucket_bytes);
  d.comm = std::move(comm);
  for (const auto& p : params)
    if (p.requires_grad()) d.params.push_back(p);
  d.bucket_of.resize(d.params.size());
  // From the last parameter back; a new bucket where the dtype or device changes or the bytes would
  // pass the limit.
  std::vector<std::vector<size_t>> groups;
  int64_t bytes = 0;
  for (size_t k = d.params.size(); k-- > 0;) {
    const auto& p = d.params[k];
    const int64_t b = p.numel() * int64_t(p.element_size());
    const bool fresh = groups.empty() || bytes + b > options.bucket_bytes ||
                       d.params[groups.back().front()].scalar_type() != p.scalar_type() ||
                       d.params[groups.back().front()].device() != p.device();
    if (fresh) {
      groups.emplace_back();
      bytes = 0;
    }
    groups.back().push_back(k);
    bytes += b;
  }
  d.views.resize(d.params.size());
  for (auto& members : groups) {
    const auto& first = d.params[members.front()];
    int64_t n = 0;
    for (size_t k : members) n += d.params[k].numel();
    Impl::Bucket bucket;
    bucket.flat = torch::zeros({n}, first.options().requires_grad(false));
    int64_t offset = 0;
    for (size_t k : members) {
      d.views[k] = bucket.flat.narrow(0, offset, d.params[k].numel()).view(d.params[k].sizes());
      offset += d.params[k].numel();
      d.bucket_of[k] = d.buckets.size();
    }
    bucket.members = int64_t(members.size());
    d.buckets.push_back(std::move(bucket));
  }
  for (size_t i = 0; i < d.params.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(d.params[i], std::make_unique<Impl::Hook>(&d, i));
  d.reset_counts();
}

DataParallel::~DataParallel() {
  for (auto& p : impl_->params) torch::autograd::impl::set_post_acc_grad_hooks(p, nullptr);
}

void DataParallel::broadcast_parameters(int root) {
  torch::NoGradGuard no_grad;
  for (auto& p : impl_->params) {
    torch::Tensor t = p;
    impl_->comm->broadcast(t, root);
  }
}

void DataParallel::zero_grad() {
  Impl& d = *impl_;
  for (auto& b : d.buckets) b.flat.zero_();
  for (size_t i = 0; i < d.params.size(); ++i) d.params[i].mutable_grad() = d.views[i];
  d.reset_counts();
  d.started_early = 0;
}

void DataParallel::set_sync(bool sync) { impl_->sync = sync; }

void DataParallel::finish() {
  Impl& d = *impl_;
  for (size_t i = 0; i < d.params.size(); ++i) d.adopt(i);  // replaced since its hook, or never hooked
  while (d.next < d.buckets.size()) d.comm->start_all_reduce_avg(d.buckets[d.next++].flat);
  d.comm->wait();
  d.reset_counts();
}

int64_t DataParallel::num_buckets() const { return int64_t(impl_->buckets.size()); }

std::vector<int64_t> DataParallel::bucket_of_parameters() const {
  return {impl_->bucket_of.begin(), impl_->bucket_of.end()};
}

int64_t DataParallel::started_during_backward() const { return impl_->started_early; }

}  // namespace llmtrain::dist
