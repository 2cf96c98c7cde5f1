// GlooCommunicator: c10d's TCPStore for the rendezvous and the abort mark, c10d's ProcessGroupGloo
// (compiled into LibTorch; its headers want Gloo's, from libgloo-dev) for the collectives. A collective
// runs on Gloo's threads while the calling rank waits for its end, looking for the abort mark every
// kLook, so that a failed rank ends every wait within a moment; a rank that never comes ends it at
// Gloo's timeout, and one that dies at once, when its connections close.
#include "llmtrain/dist/gloo.h"

// LibTorch's headers declare the Gloo process group only under this; the wheel's libtorch_cpu has it.
#define USE_C10D_GLOO 1
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <algorithm>
#include <cstdlib>
#include <thread>

#include "check.h"
#include "llmtrain/core/error.h"

namespace llmtrain::dist {
namespace {

using Bytes = std::vector<uint8_t>;
constexpr std::chrono::milliseconds kLook{50};  // how often a waiting rank looks for the abort mark

void check_cpu(const torch::Tensor& t, const char* what) {
  LLMTRAIN_CHECK(t.device().is_cpu(), "GlooCommunicator::", what, ": the tensor is on ", t.device(),
                 "; Gloo takes CPU tensors (on CUDA the Trainer uses NCCL, bootstrapped through it)");
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
    default: LLMTRAIN_CHECK(false, "GlooCommunicator::", what, ": cannot sum ", t.scalar_type());
  }
  return torch::kFloat;
}

// `t` itself when Gloo can work on it in place (contiguous, of `type`), else a contiguous copy in
// `type`, which the caller copies back.
torch::Tensor workable(const torch::Tensor& t, torch::ScalarType type) {
  return t.is_contiguous() && t.scalar_type() == type ? t : t.to(type).contiguous();
}

bool loopback(const std::string& host) { return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1"; }

}  // namespace

struct GlooCommunicator::State {
  Rendezvous where;
  c10::intrusive_ptr<c10d::TCPStore> store;
  c10::intrusive_ptr<c10d::ProcessGroupGloo> gloo;

  std::string key(const std::string& name) const { return where.key_prefix + name; }
  std::string where_text() const { return where.host + ":" + std::to_string(where.port); }
  std::string who() const { return "rank " + std::to_string(where.rank) + " of " + std::to_string(where.world_size); }

  // Runs a store call, turning c10d's errors (a lost connection: rank 0 gone) into llmtrain::Error.
  template <typename F>
  auto call(const char* what, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const llmtrain::Error&) {
      throw;
    } catch (const std::exception& e) {
      LLMTRAIN_CHECK(false, who(), ": ", what, " through the store at ", where_text(),
                     " failed (is rank 0 gone?): ", e.what());
    }
    return f();  // not reached
  }

  // The rank that marked the run aborted, "" when none did.
  std::string abort_mark(const char* what) {
    if (!call(what, [&] { return store->check({key("abort")}); })) return "";
    const Bytes mark = call(what, [&] { return store->get(key("abort")); });
    call(what, [&] { return store->add(key("abort_seen"), 1); });
    return std::string(mark.begin(), mark.end());
  }

  void throw_if_aborted(const char* what, const std::string& mark) {
    LLMTRAIN_CHECK(mark.empty(), who(), ": ", what, ": rank ", mark,
                   " failed and ended the run (its error is in its output)");
  }

  // Waits for a collective that Gloo runs and turns its failure into llmtrain::Error: an aborted run
  // names the rank that aborted it, Gloo's timeout says how long this rank waited, a closed
  // connection says a rank is gone. The wait wakes every kLook to look for the abort mark.
  void finish(const char* what, const c10::intrusive_ptr<c10d::Work>& work) {
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      try {
        work->wait(kLook);
        return;
      } catch (const std::exception& e) {
        // Only this look timed out, unless the work ended with an error of its own: it may have ended
        // well between the look's timeout and here, and then the next look returns at once.
        if (!work->isCompleted() || !work->exception()) {
          throw_if_aborted(what, abort_mark(what));
          continue;
        }
        const auto waited = std::chrono::steady_clock::now() - start;
        std::string mark;
        try {
          mark = abort_mark(what);
        } catch (const llmtrain::Error&) {  // the store is gone too (rank 0 hosted it)
        }
        throw_if_aborted(what, mark);
        const std::string why = e.what();
        LLMTRAIN_CHECK(waited < where.timeout && why.find("imed out") == std::string::npos, who(), ": ", what,
                       ": waited ", std::chrono::duration_cast<std::chrono::seconds>(waited).count(),
                       " s for the other ranks (Gloo, rendezvous at ", where_text(), "); a rank is gone or stuck ",
                       "(LLMTRAIN_DIST_TIMEOUT sets the wait)");
        LLMTRAIN_CHECK(false, who(), ": ", what, ": the connection to another rank broke, so a rank is gone (its ",
                       "error is in its output): ", why.substr(0, 300));
      }
    }
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
};

GlooCommunicator::GlooCommunicator(const Rendezvous& where, std::unique_ptr<State> state)
    : where_(where), s_(std::move(state)) {}

GlooCommunicator::~GlooCommunicator() {
  // The ranks say goodbye; rank 0's store stays up until the others have (they may still be ending
  // the last collective), for 10 s at most: a rank that died never does.
  try {
    s_->store->add(s_->key("bye"), 1);
    s_->linger("bye", where_.world_size, 10, /*until_abort=*/true);
  } catch (const std::exception&) {  // the store is gone: nothing to wait for
  }
  s_->gloo.reset();  // before the store it was built on
}

std::shared_ptr<GlooCommunicator> GlooCommunicator::connect(const Rendezvous& where) {
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
  const auto fail = [&](const char* how, const std::exception& e) {
    LLMTRAIN_CHECK(false, s->who(), ": no rendezvous at ", s->where_text(), o.isServer ? " (this rank hosts it)" : "",
                   how, " within ", std::chrono::duration_cast<std::chrono::seconds>(where.timeout).count(),
                   " s; check MASTER_ADDR, MASTER_PORT and that every rank was started: ", e.what());
  };
  try {
    s->store = c10::make_intrusive<c10d::TCPStore>(where.host, o);
  } catch (const std::exception& e) {
    fail("", e);
  }
  // Gloo's ranks connect to each other (a full mesh) through addresses they post under the prefix.
  auto options = c10d::ProcessGroupGloo::Options::create_default(where.timeout);
  const char* ifname = std::getenv("GLOO_SOCKET_IFNAME");
  try {
    if (ifname && *ifname) options->devices = {c10d::ProcessGroupGloo::createDeviceForInterface(ifname)};
    else if (loopback(where.host)) options->devices = {c10d::ProcessGroupGloo::createDeviceForHostname(where.host)};
    else options->devices = {c10d::ProcessGroupGloo::createDefaultDevice()};
  } catch (const std::exception& e) {
    LLMTRAIN_CHECK(false, s->who(), ": Gloo found no network device",
                   ifname && *ifname ? std::string(" named ") + ifname + " (GLOO_SOCKET_IFNAME)" : std::string(), ": ",
                   e.what());
  }
  options->threads = 1;  // one collective at a time is all a rank asks for; more threads only contend
  try {
    s->gloo = c10::make_intrusive<c10d::ProcessGroupGloo>(
        c10::make_intrusive<c10d::PrefixStore>(where.key_prefix + "gloo", s->store), where.rank, where.world_size,
        options);
  } catch (const std::exception& e) {
    fail(", Gloo's connections between the ranks", e);
  }
  return std::shared_ptr<GlooCommunicator>(new GlooCommunicator(where, std::move(s)));
}

void GlooCommunicator::all_reduce_sum(torch::Tensor& t) {
  check_cpu(t, "all_reduce_sum");
  const auto type = sum_type(t, "all_reduce_sum");
  if (t.numel() == 0 || where_.world_size == 1) return;
  std::vector<torch::Tensor> x{workable(t, type)};
  s_->finish("all_reduce_sum", s_->gloo->allreduce(x));
  if (!x[0].is_same(t)) t.copy_(x[0]);
}

void GlooCommunicator::reduce_scatter_sum(const torch::Tensor& input, torch::Tensor& output) {
  detail::check_parts("reduce_scatter_sum", input, output, where_.world_size);
  check_cpu(input, "reduce_scatter_sum");
  check_cpu(output, "reduce_scatter_sum");
  const auto type = sum_type(output, "reduce_scatter_sum");
  if (output.numel() == 0) return;
  // An all-reduce of the whole, of which this rank keeps its part: LibTorch's Gloo reduce-scatter
  // is one too, but its Work never reports completion to a poll.
  std::vector<torch::Tensor> x{input.to(type).contiguous()};
  s_->finish("reduce_scatter_sum", s_->gloo->allreduce(x));
  output.copy_(x[0].view({where_.world_size, -1})[where_.rank].view_as(output));
}

void GlooCommunicator::all_gather(const torch::Tensor& input, torch::Tensor& output) {
  detail::check_parts("all_gather", output, input, where_.world_size);
  check_cpu(input, "all_gather");
  check_cpu(output, "all_gather");
  if (input.numel() == 0) return;
  torch::Tensor in = input.contiguous().view({-1}), out = workable(output, output.scalar_type()), flat = out.view({-1});
  s_->finish("all_gather", s_->gloo->_allgather_base(flat, in));
  if (!out.is_same(output)) output.copy_(out);
}

void GlooCommunicator::broadcast(torch::Tensor& t, int root) {
  LLMTRAIN_CHECK(root >= 0 && root < where_.world_size, "GlooCommunicator::broadcast: root ", root,
                 " is not a rank of ", where_.world_size);
  check_cpu(t, "broadcast");
  if (t.numel() == 0 || where_.world_size == 1) return;
  std::vector<torch::Tensor> x{workable(t, t.scalar_type())};
  c10d::BroadcastOptions options;
  options.rootRank = root;
  s_->finish("broadcast", s_->gloo->broadcast(x, options));
  if (!x[0].is_same(t)) t.copy_(x[0]);
}

void GlooCommunicator::barrier() {
  if (where_.world_size > 1) s_->finish("barrier", s_->gloo->barrier());
}

void GlooCommunicator::abort(int code) {
  try {
    const std::string me = std::to_string(where_.rank);
    s_->store->set(s_->key("abort"), Bytes(me.begin(), me.end()));
    s_->linger("abort_seen", where_.world_size - 1, 2, /*until_abort=*/false);  // for the others to read the mark
  } catch (const std::exception&) {  // the store is gone already: the others find out through it
  }
  std::_Exit(code);
}

}  // namespace llmtrain::dist
