// bench_dist: all-reduce bandwidth of the communicators llmtrain's ranks use, at a few sizes, on this
// machine: MPI (mpirun starts the ranks), Gloo (ranks with torchrun's variables, started here) and, where
// there is a GPU for every rank, NCCL bootstrapped through Gloo. Each row sums float32 tensors of one size
// over the ranks, checks the sum, and reports the mean time of a call with its algorithm bandwidth
// (bytes / time) and bus bandwidth (algorithm bandwidth x 2(n-1)/n, what a ring moves over each link),
// and each engine's bandwidth as a multiple of MPI's at that size (MPI is the baseline), then the rows
// as one JSON line.
//   build/bin/bench_dist --ranks 2 [--sizes 4K,256K,4M,64M] [--seconds 0.5]
#include <llmtrain/llmtrain.h>
#include <sys/wait.h>
#include <torch/cuda.h>
#include <unistd.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "cli.h"

namespace {

// Set for the ranks a bench_dist starts: which communicator they measure, and where rank 0 writes its
// rows (JSON lines).
constexpr const char* kEngineVar = "LLMTRAIN_BENCH_DIST_ENGINE";
constexpr const char* kRowsVar = "LLMTRAIN_BENCH_DIST_ROWS";

struct Options {
  int ranks = 2;
  std::vector<std::string> sizes = {"4K", "256K", "4M", "64M"};
  double seconds = 0.5;  // timed per size, after a warm-up
};

int64_t parse_size(const std::string& text) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
  }
  const std::string unit = text.substr(used);
  const int64_t scale = unit.empty() ? 1 : unit == "K" ? 1 << 10 : unit == "M" ? 1 << 20 : unit == "G" ? 1 << 30 : 0;
  LLMTRAIN_CHECK(used > 0 && scale > 0 && v > 0, "bench_dist: --sizes: \"", text,
                 "\" is not a size in bytes (e.g. 4096, 256K, 4M, 1G)");
  return int64_t(v * double(scale));
}

// ---- a rank: times the engine's all-reduce at every size ----------------------------------------

nlohmann::json measure(llmtrain::dist::Communicator& comm, const std::string& engine, torch::Device device,
                       const std::vector<int64_t>& sizes, double seconds) {
  const auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  const int n = comm.world_size();
  nlohmann::json rows = nlohmann::json::array();
  for (const int64_t bytes : sizes) {
    const int64_t count = std::max<int64_t>(1, bytes / 4);
    auto t = torch::full({count}, float(comm.rank() + 1), torch::TensorOptions().device(device));
    comm.all_reduce_sum(t);  // the first call also checks the sum: 1 + 2 + ... + n everywhere
    sync();
    LLMTRAIN_CHECK(torch::equal(t.cpu(), torch::full({count}, float(n * (n + 1) / 2))), "bench_dist: ", engine,
                   " summed ", bytes, " bytes wrong");
    // A timed warm-up: rank 0 decides from it how many calls fill `seconds` and tells the others, so
    // that every rank calls alike.
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < 4; ++i) comm.all_reduce_sum(t);
    sync();
    const double once = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 4;
    auto calls = torch::full({1}, std::clamp<int64_t>(int64_t(seconds / std::max(once, 1e-7)), 3, 100000),
                             torch::TensorOptions().dtype(torch::kLong).device(device));
    comm.broadcast(calls, 0);
    const int64_t k = calls.cpu().item<int64_t>();
    comm.barrier();
    sync();
    const auto t0 = std::chrono::steady_clock::now();
    for (int64_t i = 0; i < k; ++i) comm.all_reduce_sum(t);
    sync();
    const double each = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / double(k);
    const double algbw = double(count * 4) / each / 1e9;
    rows.push_back({{"engine", engine},
                    {"ranks", n},
                    {"bytes", count * 4},
                    {"calls", k},
                    {"us_per_call", each * 1e6},
                    {"algbw_GBps", algbw},
                    {"busbw_GBps", algbw * 2.0 * (n - 1) / n}});
  }
  return rows;
}

int run_rank(const std::string& engine, const std::vector<int64_t>& sizes, double seconds) {
  auto comm = llmtrain::dist::from_environment();
  LLMTRAIN_CHECK(comm, "bench_dist: started as a rank (", kEngineVar, "=", engine, ") outside a launch");
  nlohmann::json rows;
  if (engine == "nccl") {
    const torch::Device gpu(torch::kCUDA, llmtrain::dist::local_rank());
    auto nccl = llmtrain::dist::NcclCommunicator::create(comm, gpu);
    rows = measure(*nccl, engine, gpu, sizes, seconds);
  } else {
    rows = measure(*comm, engine, torch::kCPU, sizes, seconds);
  }
  if (comm->rank() == 0) {
    std::ofstream out(std::getenv(kRowsVar), std::ios::app);
    for (const auto& r : rows) out << r.dump() << "\n";
  }
  return 0;
}

// ---- the parent: starts the ranks of each engine ------------------------------------------------

// Starts `argv` once per rank (torchrun's variables; the rank's own in `env`) or once (mpirun starts
// the ranks itself), and returns the first non-zero exit status among them.
int spawn(const std::vector<std::string>& argv, int copies, const std::string& engine, const std::string& rows) {
  const int port = llmtrain::dist::free_port();
  std::vector<pid_t> pids;
  for (int r = 0; r < copies; ++r) {
    const pid_t pid = ::fork();
    LLMTRAIN_CHECK(pid >= 0, "bench_dist: fork failed");
    if (pid == 0) {
      ::setenv(kEngineVar, engine.c_str(), 1);
      ::setenv(kRowsVar, rows.c_str(), 1);
      if (engine != "mpi") {
        for (const auto& [k, v] :
             std::vector<std::pair<const char*, std::string>>{{"RANK", std::to_string(r)},
                                                              {"LOCAL_RANK", std::to_string(r)},
                                                              {"WORLD_SIZE", std::to_string(copies)},
                                                              {"MASTER_ADDR", "127.0.0.1"},
                                                              {"MASTER_PORT", std::to_string(port)}})
          ::setenv(k, v.c_str(), 1);
      }
      std::vector<char*> args;
      for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      ::execvp(args[0], args.data());
      std::fprintf(stderr, "bench_dist: cannot start %s\n", args[0]);
      ::_exit(127);
    }
    pids.push_back(pid);
  }
  int status = 0;
  for (const pid_t pid : pids) {
    int s = 0;
    ::waitpid(pid, &s, 0);
    const int code = WIFEXITED(s) ? WEXITSTATUS(s) : 128 + WTERMSIG(s);
    if (status == 0) status = code;
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"All-reduce bandwidth of MPI, Gloo and NCCL between ranks on this machine"};
  llmtrain_cli::setup(app, "bench_dist --ranks 2 --sizes 4K,256K,4M,64M");
  Options o;
  app.add_option("--ranks", o.ranks, "ranks per engine")->check(CLI::Range(2, 64));
  app.add_option("--sizes", o.sizes, "tensor sizes in bytes (K, M, G suffixes)")->delimiter(',');
  app.add_option("--seconds", o.seconds, "time spent calling at each size")->check(CLI::Range(0.001, 60.0));
  CLI11_PARSE(app, argc, argv);
  try {
    std::vector<int64_t> sizes;
    for (const auto& s : o.sizes) sizes.push_back(parse_size(s));
    if (const char* engine = std::getenv(kEngineVar)) return run_rank(engine, sizes, o.seconds);

    char self[4096];
    const ssize_t len = ::readlink("/proc/self/exe", self, sizeof(self) - 1);
    LLMTRAIN_CHECK(len > 0, "bench_dist: cannot find its own program file");
    std::vector<std::string> rank_argv{std::string(self, size_t(len)), "--seconds", std::to_string(o.seconds),
                                       "--sizes"};
    std::string joined;
    for (const auto& s : o.sizes) joined += (joined.empty() ? "" : ",") + s;
    rank_argv.push_back(joined);
    char rows_path[] = "/tmp/bench_dist_XXXXXX";
    const int fd = ::mkstemp(rows_path);
    LLMTRAIN_CHECK(fd >= 0, "bench_dist: cannot create a temporary file in /tmp");
    ::close(fd);

    std::vector<std::pair<std::string, std::string>> skipped;
    const auto engine = [&](const std::string& name, std::vector<std::string> launcher, int copies) {
      launcher.insert(launcher.end(), rank_argv.begin(), rank_argv.end());
      std::printf("%s: %d ranks ...\n", name.c_str(), o.ranks);
      std::fflush(stdout);
      const int status = spawn(launcher, copies, name, rows_path);
      if (status != 0) skipped.emplace_back(name, "its ranks exited with status " + std::to_string(status));
    };
    if (llmtrain::dist::mpi_available())
      engine("mpi",
             {LLMTRAIN_MPIEXEC, "-np", std::to_string(o.ranks), "--oversubscribe", "--allow-run-as-root", "-x",
              kEngineVar, "-x", kRowsVar},
             1);
    else skipped.emplace_back("mpi", "llmtrain was built without MPI");
    engine("gloo", {}, o.ranks);
    const int gpus = torch::cuda::is_available() ? int(torch::cuda::device_count()) : 0;
    if (LLMTRAIN_WITH_CUDA && gpus >= o.ranks) engine("nccl", {}, o.ranks);
    else
      skipped.emplace_back("nccl", LLMTRAIN_WITH_CUDA ? "needs a GPU per rank; this machine has " + std::to_string(gpus)
                                                      : "llmtrain was built without CUDA");

    nlohmann::json all = nlohmann::json::array();
    std::ifstream in(rows_path);
    for (std::string line; std::getline(in, line);) all.push_back(nlohmann::json::parse(line));
    ::unlink(rows_path);
    std::printf("\n%-6s %6s %12s %8s %12s %12s %12s %8s\n", "engine", "ranks", "bytes", "calls", "us/call",
                "algbw GB/s", "busbw GB/s", "x MPI");
    for (auto& r : all) {
      for (const auto& b : all)
        if (b["engine"] == "mpi" && b["bytes"] == r["bytes"])
          r["vs_mpi"] = r["algbw_GBps"].get<double>() / b["algbw_GBps"].get<double>();
      std::printf("%-6s %6d %12lld %8lld %12.1f %12.3f %12.3f %8s\n", r["engine"].get<std::string>().c_str(),
                  r["ranks"].get<int>(), (long long)r["bytes"].get<int64_t>(), (long long)r["calls"].get<int64_t>(),
                  r["us_per_call"].get<double>(), r["algbw_GBps"].get<double>(), r["busbw_GBps"].get<double>(),
                  r.contains("vs_mpi") ? (std::to_string(r["vs_mpi"].get<double>()).substr(0, 5) + "x").c_str() : "-");
    }
    for (const auto& [name, why] : skipped) std::printf("%-6s not measured: %s\n", name.c_str(), why.c_str());
    std::printf("%s\n", all.dump().c_str());
    // A failed engine fails the run; one this machine cannot have (no MPI, no GPUs) does not.
    for (const auto& [name, why] : skipped)
      if (why.rfind("its ranks", 0) == 0) return 1;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_dist: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
}
