// StoreCommunicator over c10d::TCPStore. Collective number n posts under "<key_prefix><n>/..." and
// waits for the keys the other ranks post; each rank then counts itself done, and the last one
// deletes the collective's keys, so the store holds only collectives in flight. A waiting rank polls,
// and looks for the abort mark every few polls, so that a failed rank ends every wait within a
// moment, and a rank that never comes ends it at the timeout.
#include "llmtrain/dist/store.h"

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstring>
#include <thread>

#include "check.h"
#include "llmtrain/core/error.h"

namespace llmtrain::dist {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr std::chrono::microseconds kPoll{5000};  // the longest pause between two looks
constexpr size_t kPiece = 1 << 20;

Bytes bytes_of(const torch::Tensor& t) {
  const torch::Tensor c = t.contiguous();
  Bytes b(size_t(c.numel()) * c.element_size());
  if (!b.empty()) std::memcpy(b.data(), c.data_ptr(), b.size());
  return b;
}

// `bytes` as a tensor shaped and typed like `like` (a copy).
torch::Tensor tensor_of(const Bytes& bytes, const torch::Tensor& like, const char* what) {
  LLMTRAIN_CHECK(bytes.size() == size_t(like.numel()) * like.element_size(), "StoreCommunicator::", what,
                 ": another rank sent ", bytes.size(), " bytes where this rank expects ", like.numel(), " ",
                 like.scalar_type(), "; the ranks disagree on the tensor");
  torch::Tensor t = torch::empty(like.sizes(), like.options().memory_format(torch::MemoryFormat::Contiguous));
  if (!bytes.empty()) std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
  return t;
}

void check_cpu(const torch::Tensor& t, const char* what) {
  LLMTRAIN_CHECK(t.device().is_cpu(), "StoreCommunicator::", what, ": the tensor is on ", t.device(),
                 "; the store takes CPU tensors (on CUDA the Trainer uses NCCL, bootstrapped through it)");
}

// The type a sum runs in: 16-bit floats in float32.
torch::ScalarType sum_type(const torch::Tensor& t, const char* what) {
  switch (t.scalar_type()) {
    case torch::kFloat:
    case torch::kDouble:
    case torch::kLong:
    case torch::kInt: return t.scalar_type();
    case torch::kBFloat16:
    case torch::kHalf: return torch::kFloat;
    default: LLMTRAIN_CHECK(false, "StoreCommunicator::", what, ": cannot sum ", t.scalar_type());
  }
  return torch::kFloat;
}

// `out` = the sum, in rank order and in `type`, of the ranks' values `got`.
void sum_into(torch::Tensor& out, torch::ScalarType type, const std::vector<Bytes>& got, const char* what) {
  torch::Tensor sum = torch::zeros(out.sizes(), out.options().dtype(type));
  for (const auto& b : got) sum.add_(tensor_of(b, out, what).to(type));
  out.copy_(sum);
}

}  // namespace

struct StoreCommunicator::State {
  Rendezvous where;
  c10::intrusive_ptr<c10d::TCPStore> store;
  int64_t next = 0;  // the number of the next collective

  std::string key(const std::string& name) const { return where.key_prefix + name; }
  std::string where_text() const { return where.host + ":" + std::to_string(where.port); }

  // Runs a store call, turning c10d's errors (a lost connection: rank 0 gone) into llmtrain::Error.
  template <typename F>
  auto call(const char* what, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const llmtrain::Error&) {
      throw;
    } catch (const std::exception& e) {
      LLMTRAIN_CHECK(false, "rank ", where.rank, " of ", where.world_size, ": ", what, " through the store at ",
                     where_text(), " failed (is rank 0 gone?): ", e.what());
    }
    return f();  // not reached
  }

  // Waits for `keys` until the timeout, polling (c10d's own timed wait logs each expiry); throws when
  // another rank aborted or the others did not come.
  void await(const std::vector<std::string>& keys, const char* what) {
    const auto start = std::chrono::steady_clock::now();
    auto pause = std::chrono::microseconds(20);
    for (int polls = 0; !call(what, [&] { return store->check(keys); }); ++polls) {
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::microseconds(kPoll));
      if (polls % 16 != 15) continue;
      if (call(what, [&] { return store->check({key("abort")}); })) {
        const Bytes who = call(what, [&] { return store->get(key("abort")); });
        call(what, [&] { return store->add(key("abort_seen"), 1); });
        LLMTRAIN_CHECK(false, "rank ", where.rank, " of ", where.world_size, ": ", what, ": rank ",
                       std::string(who.begin(), who.end()), " failed and ended the run (its error is in its output)");
      }
      const auto waited = std::chrono::steady_clock::now() - start;
      LLMTRAIN_CHECK(waited < where.timeout, "rank ", where.rank, " of ", where.world_size, ": ", what, ": waited ",
                     std::chrono::duration_cast<std::chrono::seconds>(waited).count(), " s for the other ranks ",
                     "(the store at ", where_text(), "); a rank is gone or stuck (LLMTRAIN_DIST_TIMEOUT sets the ",
                     "wait)");
    }
  }

  // One collective: posts `post` (name under the collective's prefix, bytes), waits for and reads
  // `fetch`; `all` is every name any rank posts, deleted by the last rank done. A value travels in
  // pieces of kPiece bytes (the store's libuv server refuses large messages) under "<name>#<i>", then
  // "<name>" gives their number, so that its presence means the whole value is there.
  std::vector<Bytes> exchange(const char* what, const std::vector<std::pair<std::string, Bytes>>& post,
                              const std::vector<std::string>& fetch, const std::vector<std::string>& all) {
    const std::string prefix = key(std::to_string(next++) + "/");
    const auto named = [&](const std::vector<std::string>& names) {
      std::vector<std::string> keys;
      for (const auto& n : names) keys.push_back(prefix + n);
      return keys;
    };
    // The keys of the pieces that the headers `keys` (read as `counts`) announce.
    const auto pieces = [](const std::vector<std::string>& keys, const std::vector<Bytes>& counts) {
      std::vector<std::vector<std::string>> out(keys.size());
      for (size_t k = 0; k < keys.size(); ++k)
        for (int64_t i = 0, n = std::stoll(std::string(counts[k].begin(), counts[k].end())); i < n; ++i)
          out[k].push_back(keys[k] + "#" + std::to_string(i));
      return out;
    };
    for (const auto& [name, value] : post) {
      const size_t n = std::max<size_t>(1, (value.size() + kPiece - 1) / kPiece);
      for (size_t i = 0; i < n; ++i) {
        const size_t from = std::min(value.size(), i * kPiece), to = std::min(value.size(), from + kPiece);
        call(what, [&] {
          store->set(prefix + name + "#" + std::to_string(i),
                     Bytes(value.begin() + long(from), value.begin() + long(to)));
        });
      }
      const std::string count = std::to_string(n);
      call(what, [&] { store->set(prefix + name, Bytes(count.begin(), count.end())); });
    }
    std::vector<Bytes> got;
    if (!fetch.empty()) {
      const auto keys = named(fetch);
      await(keys, what);
      for (const auto& piece_keys : pieces(keys, call(what, [&] { return store->multiGet(keys); }))) {
        Bytes whole;
        for (const auto& piece : call(what, [&] { return store->multiGet(piece_keys); }))
          whole.insert(whole.end(), piece.begin(), piece.end());
        got.push_back(std::move(whole));
      }
    }
    if (call(what, [&] { return store->add(prefix + "done", 1); }) == where.world_size) {
      const auto keys = named(all);
      for (const auto& piece_keys : pieces(keys, call(what, [&] { return store->multiGet(keys); })))
        for (const auto& k : piece_keys) call(what, [&] { return store->deleteKey(k); });
      for (const auto& k : keys) call(what, [&] { return store->deleteKey(k); });
      call(what, [&] { return store->deleteKey(prefix + "done"); });
    }
    return got;
  }

  // Keeps rank 0's store up (it hosts it) until the counter `name` reaches `count` (or, with
  // `until_abort`, a rank aborted), for `seconds` at most: ranks that died never count themselves.
  void linger(const std::string& name, int64_t count, int seconds, bool until_abort) {
    if (where.rank != 0 || where.agent_store) return;
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (store->add(key(name), 0) < count && !(until_abort && store->check({key("abort")})) &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }

  // Every rank's `mine`, in rank order (all_reduce_sum, all_gather, barrier).
  std::vector<Bytes> share(const char* what, Bytes mine) {
    std::vector<std::string> ranks;
    for (int r = 0; r < where.world_size; ++r) ranks.push_back(std::to_string(r));
    return exchange(what, {{ranks[size_t(where.rank)], std::move(mine)}}, ranks, ranks);
  }
};

StoreCommunicator::StoreCommunicator(const Rendezvous& where, std::unique_ptr<State> state)
    : where_(where), s_(std::move(state)) {}

StoreCommunicator::~StoreCommunicator() {
  // The ranks say goodbye; rank 0's store stays up until the others have (they may still be ending
  // the last collective), for 10 s at most: a rank that died never does.
  try {
    s_->store->add(s_->key("bye"), 1);
    s_->linger("bye", where_.world_size, 10, /*until_abort=*/true);
  } catch (const std::exception&) {  // the store is gone: nothing to wait for
  }
}

std::shared_ptr<StoreCommunicator> StoreCommunicator::connect(const Rendezvous& where) {
  LLMTRAIN_CHECK(where.world_size >= 1 && where.rank >= 0 && where.rank < where.world_size, "rendezvous: rank ",
                 where.rank, " is not one of ", where.world_size, " ranks");
  LLMTRAIN_CHECK(where.port > 0 && where.port < 65536, "rendezvous: port ", where.port, " is not a TCP port");
  auto s = std::make_unique<State>();
  s->where = where;
  c10d::TCPStoreOptions o;
  o.port = uint16_t(where.port);
  o.isServer = where.rank == 0 && !where.agent_store;
  if (!where.agent_store) o.numWorkers = size_t(where.world_size);
  o.waitWorkers = !where.agent_store;  // a rank counts itself in there; rank 0 then waits for the count
  o.timeout = where.timeout;
  try {
    s->store = c10::make_intrusive<c10d::TCPStore>(where.host, o);
  } catch (const std::exception& e) {
    LLMTRAIN_CHECK(false, "rank ", where.rank, " of ", where.world_size, ": no rendezvous at ", s->where_text(),
                   o.isServer ? " (this rank hosts it)" : "", " within ",
                   std::chrono::duration_cast<std::chrono::seconds>(where.timeout).count(),
                   " s; check MASTER_ADDR, MASTER_PORT and that every rank was started: ", e.what());
  }
  std::shared_ptr<StoreCommunicator> comm(new StoreCommunicator(where, std::move(s)));
  comm->barrier();  // every rank is here (an agent's store does not count them)
  return comm;
}

void StoreCommunicator::all_reduce_sum(torch::Tensor& t) {
  check_cpu(t, "all_reduce_sum");
  const auto type = sum_type(t, "all_reduce_sum");
  sum_into(t, type, s_->share("all_reduce_sum", bytes_of(t)), "all_reduce_sum");
}

void StoreCommunicator::reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) {
  detail::check_parts("reduce_scatter_sum", input, output, where_.world_size);
  check_cpu(input, "reduce_scatter_sum");
  check_cpu(output, "reduce_scatter_sum");
  const auto type = sum_type(output, "reduce_scatter_sum");
  const int world = where_.world_size, me = where_.rank;
  const auto name = [](int from, int to) { return std::to_string(from) + ">" + std::to_string(to); };
  const auto parts = input.contiguous().view({world, -1});
  std::vector<std::pair<std::string, Bytes>> post;
  std::vector<std::string> fetch, all;
  for (int r = 0; r < world; ++r) {
    post.emplace_back(name(me, r), bytes_of(parts[r]));
    fetch.push_back(name(r, me));
    for (int d = 0; d < world; ++d) all.push_back(name(r, d));
  }
  sum_into(output, type, s_->exchange("reduce_scatter_sum", post, fetch, all), "reduce_scatter_sum");
}

void StoreCommunicator::all_gather(const torch::Tensor& input, torch::Tensor& output) {
  detail::check_parts("all_gather", output, input, where_.world_size);
  check_cpu(input, "all_gather");
  check_cpu(output, "all_gather");
  const int world = where_.world_size;
  const auto got = s_->share("all_gather", bytes_of(input));
  auto parts = output.view({world, -1});
  for (int r = 0; r < world; ++r) parts[r].copy_(tensor_of(got[size_t(r)], input, "all_gather").view({-1}));
}

void StoreCommunicator::broadcast(torch::Tensor& t, int root) {
  LLMTRAIN_CHECK(root >= 0 && root < where_.world_size, "StoreCommunicator::broadcast: root ", root,
                 " is not a rank of ", where_.world_size);
  check_cpu(t, "broadcast");
  const std::vector<std::string> names = {std::to_string(root)};
  if (where_.rank == root) {
    s_->exchange("broadcast", {{names[0], bytes_of(t)}}, {}, names);
  } else {
    const auto got = s_->exchange("broadcast", {}, names, names);
    t.copy_(tensor_of(got[0], t, "broadcast"));
  }
}

void StoreCommunicator::barrier() { s_->share("barrier", Bytes{1}); }

void StoreCommunicator::abort(int code) {
  try {
    const std::string me = std::to_string(where_.rank);
    s_->store->set(s_->key("abort"), Bytes(me.begin(), me.end()));
    s_->linger("abort_seen", where_.world_size - 1, 2, /*until_abort=*/false);  // for the others to read the mark
  } catch (const std::exception&) {  // the store is gone already: the others find out through it
  }
  std::_Exit(code);
}

}  // namespace llmtrain::dist
