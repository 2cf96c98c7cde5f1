// The loader keeps a cursor over the epoch's window stream: the shard order of the epoch and the
// window order of the current shard are rebuilt from (seed, epoch, shard) whenever the cursor enters
// them (ShuffleUnit::kBatch replays llm.c's one generator up to there instead, a draw per group), so
// no table of all windows is kept and any state can be restored cheaply. A background
// thread runs the cursor ahead and fills a small queue; restoring a state restarts it. The stream runs
// from one epoch straight into the next, so a batch may hold the last windows of one epoch and the
// first of the next: that keeps R ranks exactly equal to one process, at any epoch boundary.
#include "llmtrain/data/dataloader.h"

#include <glob.h>

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>

#include "llmtrain/core/error.h"
#include "llmtrain/data/shard.h"
#include "permutation.h"

namespace llmtrain::data {
namespace {

std::vector<std::string> glob_files(const std::string& pattern) {
  glob_t g{};
  const int rc = ::glob(pattern.c_str(), 0, nullptr, &g);
  std::vector<std::string> files;
  if (rc == 0)
    for (size_t i = 0; i < g.gl_pathc; ++i) files.emplace_back(g.gl_pathv[i]);
  ::globfree(&g);
  LLMTRAIN_CHECK(!files.empty(), "DataLoader: no shard matches \"", pattern, "\"");
  return files;  // glob sorts
}

}  // namespace

struct DataLoader::Impl {
  DataLoaderOptions o;
  std::vector<std::string> files;
  std::vector<Shard> shards;
  std::vector<int64_t> windows;  // per shard: the windows an epoch visits
  int64_t total_windows = 0;
  int64_t tokens = 0;

  // Producer cursor.
  DataLoaderState cur;
  std::vector<int64_t> shard_order, window_order;
  std::mt19937 llmc_rng;  // kBatch: llm.c's one generator, positioned for the next shard's draws

  bool batch_order() const { return o.shuffle && o.shuffle_unit == ShuffleUnit::kBatch; }

  // Queue between the producer thread and next().
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::pair<Batch, DataLoaderState>> queue;
  std::exception_ptr error;
  bool stop = false;
  std::thread worker;
  DataLoaderState consumed;  // state after the last batch handed out

  int64_t group() const { return int64_t(o.world_size) * o.batch_size; }

  int64_t groups_of(int64_t shard) const { return windows[size_t(shard)] / group(); }

  void enter_shard() {
    if (cur.shard >= int64_t(shards.size())) return;
    const int64_t k = shard_order[size_t(cur.shard)];
    if (!batch_order()) {
      window_order = detail::permutation(windows[size_t(k)], o.seed, uint64_t(cur.epoch), uint64_t(k) + 1, o.shuffle);
      return;
    }
    std::vector<int64_t> groups = detail::identity(groups_of(k));  // each group's windows stay in file order
    detail::shuffle_in_place(groups, llmc_rng);
    const int64_t g = group();
    window_order.clear();
    for (const int64_t q : groups)
      for (int64_t i = 0; i < g; ++i) window_order.push_back(q * g + i);
  }

  // llm.c's draws up to (epoch, shard): each epoch permutes the shard order it had, then each shard
  // entered permutes its groups; the generator is left for the groups of the shard named.
  void replay_llmc(const DataLoaderState& s) {
    llmc_rng.seed(uint32_t(o.seed));
    shard_order = detail::identity(int64_t(shards.size()));
    for (int64_t e = 0;; ++e) {
      detail::shuffle_in_place(shard_order, llmc_rng);
      const int64_t entered = e < s.epoch ? int64_t(shards.size()) : s.shard;
      for (int64_t j = 0; j < entered; ++j) llmc_rng.discard(uint64_t(groups_of(shard_order[size_t(j)]) - 1));
      if (e == s.epoch) return;
    }
  }

  void seek(const DataLoaderState& s) {
    LLMTRAIN_CHECK(s.epoch >= 0 && s.shard >= 0 && s.shard < int64_t(shards.size()) && s.position >= 0,
                   "DataLoader: state (epoch ", s.epoch, ", shard ", s.shard, ", position ", s.position,
                   ") is outside these ", shards.size(), " shards");
    cur = s;
    if (batch_order()) replay_llmc(s);
    else shard_order = detail::permutation(int64_t(shards.size()), o.seed, uint64_t(s.epoch), 0, o.shuffle);
    const int64_t k = shard_order[size_t(s.shard)];
    LLMTRAIN_CHECK(s.position < windows[size_t(k)], "DataLoader: state position ", s.position, " is past the ",
                   windows[size_t(k)], " windows of shard ", files[size_t(k)]);
    enter_shard();
  }

  void advance() {
    if (++cur.position < windows[size_t(shard_order[size_t(cur.shard)])]) return;
    cur.position = 0;
    if (++cur.shard < int64_t(shards.size())) enter_shard();
    else if (batch_order()) {  // llm.c's generator runs on: the new epoch permutes the last shard order
      cur = {cur.epoch + 1, 0, 0};
      detail::shuffle_in_place(shard_order, llmc_rng);
      enter_shard();
    } else seek({cur.epoch + 1, 0, 0});  // the stream goes straight on into the next epoch
  }

  // One batch of this rank's windows, read into host memory; returns the state after its group.
  std::pair<Batch, DataLoaderState> produce() {
    const int64_t B = o.batch_size, T = o.seq_len;
    auto opts = torch::TensorOptions().dtype(torch::kLong).pinned_memory(o.device.is_cuda());
    torch::Tensor buf = torch::empty({B, T + 1}, opts);
    int64_t* out = buf.data_ptr<int64_t>();
    for (int64_t i = 0; i < group(); ++i) {
      const int64_t b = i - int64_t(o.rank) * B;
      if (b >= 0 && b < B) {
        const int64_t k = shard_order[size_t(cur.shard)];
        const int64_t start = window_order[size_t(cur.position)] * T;
        int64_t* w = out + b * (T + 1);
        shards[size_t(k)].read(start, T + 1, w);
        if (o.vocab_size > 0)
          for (int64_t t = 0; t <= T; ++t)
            LLMTRAIN_CHECK(w[t] < o.vocab_size, "DataLoader: shard ", files[size_t(k)], " holds token id ", w[t],
                           " at position ", start + t, ", outside the vocabulary [0, ", o.vocab_size, ")");
      }
      advance();
    }
    return {Batch{buf.narrow(1, 0, T), buf.narrow(1, 1, T), {}}, cur};
  }

  void run() {
    try {
      for (;;) {
        auto item = produce();
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return stop || int(queue.size()) < o.prefetch; });
        if (stop) return;
        queue.push_back(std::move(item));
        cv.notify_all();
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu);
      error = std::current_exception();
      cv.notify_all();
    }
  }

  void start() {
    if (o.prefetch <= 0) return;
    stop = false;
    worker = std::thread([this] { run(); });
  }

  void halt() {
    {
      std::lock_guard<std::mutex> lock(mu);
      stop = true;
      cv.notify_all();
    }
    if (worker.joinable()) worker.join();
    queue.clear();
    error = nullptr;
  }
};

DataLoader::DataLoader(DataLoaderOptions options) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.o = std::move(options);
  const auto& o = d.o;
  LLMTRAIN_CHECK(o.batch_size > 0, "DataLoader: batch_size must be positive, got ", o.batch_size);
  LLMTRAIN_CHECK(o.seq_len > 0, "DataLoader: seq_len must be positive, got ", o.seq_len);
  LLMTRAIN_CHECK(o.world_size > 0 && o.rank >= 0 && o.rank < o.world_size, "DataLoader: rank ", o.rank,
                 " is outside world size ", o.world_size);
  d.files = glob_files(o.pattern);
  check_shard_set(d.files);
  for (const auto& f : d.files) {
    d.shards.emplace_back(f);
    const int64_t n = d.shards.back().num_tokens();
    LLMTRAIN_CHECK(n >= o.seq_len + 1, "DataLoader: shard ", f, " holds ", n,
                   " tokens, fewer than one window of seq_len + 1 = ", o.seq_len + 1);
    int64_t w = (n - 1) / o.seq_len;
    if (d.batch_order()) {
      LLMTRAIN_CHECK(w >= d.group(), "DataLoader: shard ", f, " holds ", w, " windows of ", o.seq_len,
                     " tokens, fewer than one shuffled batch of world_size * batch_size = ", d.group());
      w -= w % d.group();  // as llm.c: the last partial batch of a shard is not visited
    }
    d.windows.push_back(w);
    d.total_windows += d.windows.back();
    d.tokens += n;
  }
  d.seek({0, 0, 0});
  d.start();
}

DataLoader::~DataLoader() { impl_->halt(); }

Batch DataLoader::next() {
  Impl& d = *impl_;
  std::pair<Batch, DataLoaderState> item;
  if (d.o.prefetch <= 0) {
    item = d.produce();
  } else {
    std::unique_lock<std::mutex> lock(d.mu);
    d.cv.wait(lock, [&] { return !d.queue.empty() || d.error; });
    if (d.queue.empty()) std::rethrow_exception(d.error);
    item = std::move(d.queue.front());
    d.queue.pop_front();
    d.cv.notify_all();
  }
  d.consumed = item.second;
  Batch& b = item.first;
  if (d.o.device.is_cuda()) {  // from pinned memory, asynchronously on the current stream
    b.inputs = b.inputs.to(d.o.device, /*non_blocking=*/true);
    b.targets = b.targets.to(d.o.device, /*non_blocking=*/true);
  } else {
    b.inputs = b.inputs.contiguous();
    b.targets = b.targets.contiguous();
  }
  return b;
}

DataLoaderState DataLoader::state() const { return impl_->consumed; }

void DataLoader::load_state(const DataLoaderState& state) {
  Impl& d = *impl_;
  d.halt();
  d.seek(state);
  d.consumed = state;
  d.start();
}

int64_t DataLoader::num_tokens() const { return impl_->tokens; }
int64_t DataLoader::windows_per_epoch() const { return impl_->total_windows; }
const std::vector<std::string>& DataLoader::files() const { return impl_->files; }

}  // namespace llmtrain::data
