// Each parameter's post-accumulate hook counts its bucket down during a synced backward; a bucket at
// zero starts, and so does every bucket after it that is also complete, so the order of reductions is
// the bucket order on every rank whatever order the hooks fire in.
#include "llmtrain/dist/data_parallel.h"

#include <torch/autograd.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include <algorithm>

#include "llmtrain/core/error.h"

namespace llmtrain::dist {

struct DataParallel::Impl {
  struct Bucket {
    torch::Tensor flat;   // the gradients (ZeRO-1: zero-padded to a multiple of the world size)
    int64_t members = 0;  // parameters whose gradients it holds
    int64_t pending = 0;  // members whose gradient of the synced backward is still to come
    // ZeRO-1: this rank's part of the averaged gradients, its part of the parameters (the gather's
    // input) and the whole gathered bucket of parameters.
    torch::Tensor grad_part, param_part, gathered;
    std::vector<std::pair<size_t, int64_t>> layout;  // (parameter, its offset in flat)
  };
  std::shared_ptr<Communicator> comm;
  std::vector<torch::Tensor> params, views;  // views[i]: params[i]'s slot in its bucket
  std::vector<size_t> bucket_of;
  std::vector<Bucket> buckets;
  bool sync = true;
  size_t next = 0;  // the first bucket not started
  int64_t started_early = 0;
  bool sharded = false;
  std::vector<ShardSlice> slices;

  void start(Bucket& b) {
    if (sharded) comm->start_reduce_scatter_avg(b.flat, b.grad_part);
    else comm->start_all_reduce_avg(b.flat);
  }

  void start_ready() {
    while (next < buckets.size() && buckets[next].pending == 0) start(buckets[next++]);
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
    LLMTRAIN_CHECK(b.pending > 0,
                   "DataParallel: a parameter got two synced gradients; call finish() after the "
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
  d.sharded = options.shard_optimizer;
  const int64_t world = d.comm->world_size(), rank = d.comm->rank();
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
    if (d.sharded) n = (n + world - 1) / world * world;
    Impl::Bucket bucket;
    const auto opts = first.options().requires_grad(false);
    bucket.flat = torch::zeros({n}, opts);
    int64_t offset = 0;
    for (size_t k : members) {
      d.views[k] = bucket.flat.narrow(0, offset, d.params[k].numel()).view(d.params[k].sizes());
      bucket.layout.emplace_back(k, offset);
      offset += d.params[k].numel();
      d.bucket_of[k] = d.buckets.size();
    }
    bucket.members = int64_t(members.size());
    if (d.sharded) {  // rank r's part: elements [r * part, (r + 1) * part) of the bucket
      const int64_t part = n / world, lo = rank * part, hi = lo + part;
      bucket.grad_part = torch::zeros({part}, opts);
      bucket.param_part = torch::zeros({part}, opts);
      bucket.gathered = torch::zeros({n}, opts);
      for (const auto& [k, off] : bucket.layout) {
        const int64_t a = std::max(lo, off), e = std::min(hi, off + d.params[k].numel());
        if (a < e)
          d.slices.push_back({k, a - off, e - a, bucket.grad_part.narrow(0, a - lo, e - a),
                              bucket.param_part.narrow(0, a - lo, e - a)});
      }
    }
    d.buckets.push_back(std::move(bucket));
  }
  for (size_t i = 0; i < d.params.size(); ++i)
    torch::autograd::impl::set_post_acc_grad_hooks(d.params[i], std::make_unique<Impl::Hook>(&d, i));
  d.reset_counts();
  load_shard_values();
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
  load_shard_values();
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
  while (d.next < d.buckets.size()) d.start(d.buckets[d.next++]);
  d.comm->wait();
  d.reset_counts();
}

const std::vector<ShardSlice>& DataParallel::shard() const { return impl_->slices; }

void DataParallel::gather_parameters() {
  Impl& d = *impl_;
  if (!d.sharded) return;
  torch::NoGradGuard no_grad;
  for (auto& b : d.buckets) {
    d.comm->all_gather(b.param_part, b.gathered);
    for (const auto& [k, off] : b.layout)
      d.params[k].copy_(b.gathered.narrow(0, off, d.params[k].numel()).view(d.params[k].sizes()));
  }
}

void DataParallel::load_shard_values() {
  Impl& d = *impl_;
  torch::NoGradGuard no_grad;
  for (auto& s : d.slices) s.value.copy_(d.params[s.param].detach().reshape(-1).narrow(0, s.offset, s.length));
}

int64_t DataParallel::num_buckets() const { return int64_t(impl_->buckets.size()); }

std::vector<int64_t> DataParallel::bucket_of_parameters() const {
  return {impl_->bucket_of.begin(), impl_->bucket_of.end()};
}

int64_t DataParallel::started_during_backward() const { return impl_->started_early; }

}  // namespace llmtrain::dist
