#include "llmtrain/train/trainer.h"

#include <ATen/Context.h>

#include "llmtrain/config.h"  // LLMTRAIN_WITH_CUDA
#if LLMTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif
#include <dirent.h>
#include <fcntl.h>
#include <torch/cuda.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>

#include "llmtrain/core/checked.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/core/host_copy.h"
#include "llmtrain/data/dataloader.h"
#include "llmtrain/data/sft.h"
#include "llmtrain/dist/data_parallel.h"
#include "llmtrain/dist/launch.h"
#include "llmtrain/dist/nccl.h"
#include "llmtrain/infer/generate.h"
#include "llmtrain/io/hf_gpt2.h"
#include "llmtrain/io/llmc.h"
#include "llmtrain/optim/optimizer.h"
#include "llmtrain/tokenizer/tokenizer.h"
#include "llmtrain/train/graphed_step.h"
#include "llmtrain/train/plot.h"
#include "../core/failpoint.h"
#include "checkpoint_state.h"
#include "../core/json.h"

namespace llmtrain::train {
namespace {

using Json = json::Json;

std::atomic<bool> g_stop{false};
// The first signal finishes the step and writes a checkpoint; a second one ends the process at once
// (the checkpoints already written are complete: a half-written one lies under a temporary name).
extern "C" void on_stop_signal(int sig) {
  if (g_stop.exchange(true)) {
    static const char msg[] = "\nsecond interrupt: stopping now, without a checkpoint of this step\n";
    [[maybe_unused]] const ssize_t n = ::write(STDERR_FILENO, msg, sizeof msg - 1);
    ::_exit(128 + sig);
  }
}

torch::Device resolve_device(const std::string& name) {
  if (name == "cpu") return torch::kCPU;
  const bool cuda = torch::cuda::is_available();
  LLMTRAIN_CHECK(cuda || name == "auto", "device \"cuda\" asked for, but no CUDA device is visible");
  return cuda ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

// Dense bf16 tensor-core FLOP/s of the device, the denominator of MFU: $LLMTRAIN_PEAK_TFLOPS when set
// (on any device), else the datasheet figure of known GPUs, else 0 (MFU not reported).
double peak_flops(torch::Device device) {
  if (const char* env = std::getenv("LLMTRAIN_PEAK_TFLOPS")) {
    char* end = nullptr;
    const double tflops = std::strtod(env, &end);
    LLMTRAIN_CHECK(*env && *end == 0 && std::isfinite(tflops) && tflops > 0 && tflops < 1e9,
                   "the environment variable LLMTRAIN_PEAK_TFLOPS=\"", env,
                   "\" is not the GPU's peak in TFLOP/s (a positive number)");
    return tflops * 1e12;
  }
  if (!device.is_cuda()) return 0;
#if LLMTRAIN_WITH_CUDA
  const std::string name = at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->name;
  for (const auto& [part, tflops] : {std::pair{"H100", 989.4}, {"H200", 989.4}, {"H800", 989.4}, {"A100", 312.0}})
    if (name.find(part) != std::string::npos) return tflops * 1e12;
#else
  (void)device;
#endif
  return 0;
}

// Bytes of memory `device` offers a run: a GPU's total; on the CPU what the system has available now
// (MemAvailable plus free swap). 0 when unknown.
double device_memory(torch::Device device) {
#if LLMTRAIN_WITH_CUDA
  if (device.is_cuda()) return double(at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->totalGlobalMem);
#endif
  if (device.is_cuda()) return 0;
  std::istringstream in(fs::read_file("/proc/meminfo", uint64_t(1) << 20));
  double kib = 0;
  std::string key;
  for (double value; in >> key >> value;) {
    if (key == "MemAvailable:" || key == "SwapFree:") kib += value;
    in.ignore(64, '\n');
  }
  return kib * 1024;
}

// A lower bound of the memory a run takes: the parameters, their gradients, AdamW's two moments and the
// bf16-master copies (those two over the ranks with ZeRO-1), and one micro-batch's logits. A config
// past the device's memory is refused at once, with both figures, rather than failing in an allocation.
void check_memory(const TrainerConfig& c, torch::Device device, int world) {
  const nn::GPT2Config g = c.model.gpt2();
  const double params = double(g.stored_parameters());
  const bool master = c.train.precision == "bf16-master", low = master || c.train.precision != "fp32";
  const double weights = params * (master ? 2 + 2 : 4 + 4);          // the parameters and their gradients
  const double optimizer = params * (master ? 8 + 4 : 8) / (c.train.zero ? world : 1);
  const double logits = double(c.train.batch_size) * double(c.train.seq_len) * double(g.padded_vocab_size()) * (low ? 2 : 4);
  const double need = weights + optimizer + logits, have = device_memory(device);
  const auto gb = [](double bytes) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f GB", bytes / 1e9);
    return std::string(buf);
  };
  LLMTRAIN_CHECK(have <= 0 || need <= have, "this config needs at least ", gb(need), " on ", device.str(), " (",
                 int64_t(params / 1e6), "M parameters with gradients and AdamW state: ", gb(weights + optimizer),
                 "; the logits of ", c.train.batch_size, " x ", c.train.seq_len, " tokens: ", gb(logits), "), but ",
                 device.is_cuda() ? "the GPU has " : "the machine has ", gb(have),
                 " available: use a smaller model, train.batch_size or train.seq_len");
}

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

// Complete checkpoints (step_XXXXXXXX with a state.json, written last) under `dir`, oldest first.
std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& dir) {
  std::vector<std::pair<int64_t, std::string>> out;
  DIR* d = ::opendir(dir.c_str());
  if (!d) return out;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() != 13 || name.rfind("step_", 0) != 0 ||
        name.find_first_not_of("0123456789", 5) != std::string::npos)
      continue;  // temporary folders ("step_XXXXXXXX.tmp.PID") never count
    if (fs::exists(dir + "/" + name + "/state.json")) out.emplace_back(std::stoll(name.substr(5)), dir + "/" + name);
  }
  ::closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

// torch::save(value) into `path` through an fs::AtomicFile (written beside, flushed, renamed). PyTorch's
// zip writer is never shown a failed write: its destructor would write again and throw out of a
// destructor (an abort). A write that fails (a full disk) is kept and reported once save_to is done.
template <typename Value>
void save_torch(const Value& value, const std::string& path) {
  fs::AtomicFile file(path);
  std::string error;
  const std::function<size_t(const void*, size_t)> writer = [&](const void* data, size_t n) {
    if (error.empty()) {
      try {
        file.write({static_cast<const char*>(data), n});
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    return n;
  };
  torch::save(value, writer);
  LLMTRAIN_CHECK(error.empty(), error);
  file.commit();
}

bool same_shape(const nn::GPT2Config& a, const nn::GPT2Config& b) {
  return a.vocab_size() == b.vocab_size() && a.block_size() == b.block_size() && a.n_layer() == b.n_layer() &&
         a.n_head() == b.n_head() && a.n_embd() == b.n_embd();
}

std::string shape_text(const nn::GPT2Config& c) {
  return "vocab_size " + std::to_string(c.vocab_size()) + ", block_size " + std::to_string(c.block_size()) +
         ", n_layer " + std::to_string(c.n_layer()) + ", n_head " + std::to_string(c.n_head()) + ", n_embd " +
         std::to_string(c.n_embd());
}

std::string format_duration(double s) {
  char buf[32];
  const long t = long(s + 0.5);
  if (t >= 3600) std::snprintf(buf, sizeof buf, "%ldh%02ldm", t / 3600, (t / 60) % 60);
  else std::snprintf(buf, sizeof buf, "%ldm%02lds", t / 60, t % 60);
  return buf;
}

// The checkpoint's state.json, checked whole.
detail::CheckpointState read_state(const std::string& dir) {
  return detail::CheckpointState::parse(fs::read_file(dir + "/state.json", uint64_t(64) << 20),
                                        "checkpoint " + dir + "/state.json");
}

// A ZeRO-1 rank's part of the optimizer state: optimizer.rank00001.pt.
std::string shard_file(const char* what, int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ".rank%05d.pt", rank);
  return what + std::string(buf);
}

// Runs `body(dir/file)`, turning LibTorch's load errors into one naming the checkpoint and the file.
template <typename F>
void load_part(const std::string& dir, const char* file, F&& body) {
  try {
    body(dir + "/" + file);
  } catch (const c10::Error& e) {
    LLMTRAIN_CHECK(false, "checkpoint ", dir, ": cannot load ", file, " (", e.what_without_backtrace(), ")");
  }
}

}  // namespace

namespace {

// The names a run writes into its out_dir. A folder that holds one of them but is no run folder of
// llmtrain's is refused: those files are not ours to overwrite.
constexpr const char* kRunFiles[] = {"config.json", "metrics.jsonl", "loss.svg", "checkpoints", "tokenizer"};

// A run folder llmtrain wrote: its marker, or (from before markers) a complete checkpoint.
bool is_run_folder(const std::string& dir) {
  return fs::is_our_output(dir) || !list_checkpoints(dir + "/checkpoints").empty();
}

// out_dir is none of the places an output may never be (fs::check_output: the working folder, an
// input...), and writing the run's files there overwrites nothing llmtrain did not write, unless `force`.
void check_run_folder(const TrainerConfig& c, bool force) {
  // The run's own copy of its tokenizer (a config read from the run folder names it) is no input.
  const std::string own = c.out_dir + "/tokenizer";
  const bool copy = !c.tokenizer.sha256.empty() && fs::absolute(c.tokenizer.path).rfind(fs::absolute(own), 0) == 0;
  fs::check_output(c.out_dir, {"out_dir", {c.model.init_from, copy ? "" : c.tokenizer.path, c.data.train, c.data.val}, true});
  if (force || !fs::is_dir(c.out_dir) || is_run_folder(c.out_dir)) return;
  for (const char* f : kRunFiles)
    LLMTRAIN_CHECK(!fs::exists(c.out_dir + "/" + f), "out_dir ", c.out_dir, " holds ", f, ", which llmtrain did not ",
                   "write (the folder has no ", fs::kOutputMarker, " marker): choose another out_dir, or pass --force ",
                   "to train_gpt2 / finetune_gpt2 to write over it");
}

// Temporary checkpoint folders that a crash or a failed save left in `dir` (ours by name and place):
// removed, each said.
void remove_stale_checkpoints(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> stale;
  while (const dirent* e = ::readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 13 && name.rfind("step_", 0) == 0 &&
        (name.compare(13, 5, ".tmp.") == 0 || name.compare(13, 5, ".old.") == 0))
      stale.push_back(name);
  }
  ::closedir(d);
  for (const auto& name : stale) {
    std::printf("removing %s/%s, an incomplete checkpoint left by a crash or a failed save\n", dir.c_str(), name.c_str());
    fs::remove_tree(dir + "/" + name);
  }
}

// Every rank must train the same model with the same settings: the configurations are compared by an
// FNV-1a hash, and every rank fails alike. Where files lie (the output, data, tokenizer and initial
// weights) may differ from node to node and is left out.
void check_same_config(const TrainerConfig& c, dist::Communicator& comm) {
  TrainerConfig same = c;
  for (std::string* path : {&same.out_dir, &same.data.train, &same.data.val, &same.tokenizer.path,
                            &same.model.init_from})
    path->clear();
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char ch : same.to_json()) h = (h ^ ch) * 1099511628211ull;
  const auto mine = torch::tensor({int64_t(h)}, torch::kLong);
  torch::Tensor first = mine.clone();
  comm.broadcast(first, 0);
  torch::Tensor differ = first.ne(mine).to(torch::kLong);
  comm.all_reduce_sum(differ);
  LLMTRAIN_CHECK(differ.item<int64_t>() == 0, "the ranks' configurations differ (", differ.item<int64_t>(), " of ",
                 comm.world_size(), " ranks differ from rank 0; this is rank ", comm.rank(),
                 "): start every rank with the same config file and --set overrides");
}

// A resumed run goes on as the checkpoint's run would have: keys that change what it computes (the
// model, the data and its order, the batch, the schedule, the precision, the seed) are refused; others
// (evaluation, checkpoints, samples, paths, optimizer constants) are listed, and the run goes on.
void check_resumed_config(const TrainerConfig& was, const TrainerConfig& now, const std::string& dir, bool say) {
  const Json a = json::parse(was.to_json(), dir), b = json::parse(now.to_json(), "the config");
  const bool constant = now.train.schedule == "constant";
  std::string refused, changed;
  for (const auto& key : TrainerConfig::keys()) {
    const size_t dot = key.find('.');
    const Json& x = dot == std::string::npos ? a[key] : a[key.substr(0, dot)][key.substr(dot + 1)];
    const Json& y = dot == std::string::npos ? b[key] : b[key.substr(0, dot)][key.substr(dot + 1)];
    if (x == y || key.rfind("tokenizer.", 0) == 0) continue;  // the tokenizer is compared by its files
    const bool breaks = (key.rfind("model.", 0) == 0 && key != "model.init_from") || key == "data.format" ||
                        key == "data.pack" || key == "data.shuffle" || key == "data.shuffle_unit" ||
                        key == "train.batch_size" || key == "train.seq_len" || key == "train.total_batch_tokens" ||
                        key == "train.lr" || key == "train.min_lr_frac" || key == "train.warmup_steps" ||
                        key == "train.schedule" || key == "train.precision" || key == "train.rounding" ||
                        key == "train.seed" || (key == "train.max_steps" && !constant);
    (breaks ? refused : changed) += "\n  " + key + ": " + json::excerpt(x) + " -> " + json::excerpt(y);
  }
  LLMTRAIN_CHECK(refused.empty(), "cannot resume ", dir, " exactly: these keys differ from the checkpoint's run",
                 refused, "\nresume with the run's own config (", now.out_dir, "/config.json), or start a new out_dir");
  if (say && !changed.empty()) std::printf("resuming with keys changed since the checkpoint:%s\n", changed.c_str());
}

}  // namespace

struct Trainer::Impl {
  TrainerConfig cfg;
  std::shared_ptr<dist::Communicator> comm;  // null: one process
  int rank = 0, world = 1;
  torch::Device device = torch::kCPU;
  nn::GPT2 model{nullptr};
  std::unique_ptr<optim::MixedPrecisionOptimizer> opt;
  std::unique_ptr<dist::DataParallel> dp;  // several ranks
  std::unique_ptr<tokenizer::Tokenizer> tok;
  TokenizerConfig run_tok;  // rank 0: the copy in out_dir/tokenizer, as the run's configs name it (relative)
  std::unique_ptr<data::SFTDataset> sft_train, sft_val;  // read by the loaders below (SFT runs)
  std::unique_ptr<data::BatchSource> train, val;
  int64_t accum = 1;
  double peak_flops = 0;  // of the device, for MFU; 0: unknown
  int64_t step = 0;
  int64_t saved_step = -1;    // the step of the newest checkpoint written or resumed from
  double elapsed_before = 0;  // seconds of earlier runs (resumed)
  std::function<void(const StepRecord&)> callback;
  bool stop_requested = false;
  std::unique_ptr<GraphedStep> graph;  // train.cuda_graph: made at the first step
  struct sigaction old_int{}, old_term{};

  // A micro-step's forward and backward (its gradients added to the parameters'); its loss, detached.
  torch::Tensor micro_step(const torch::Tensor& inputs, const torch::Tensor& targets, const torch::Tensor& positions) {
    torch::Tensor loss;
    {
      optim::AutocastScope amp(device.type(), opt->options().precision);
      loss = model->loss(inputs, targets, positions);
    }
    opt->scale_loss(loss / double(accum)).backward();
    return loss.detach();
  }

  // The CPU generator's state, and the device's when it is a GPU: what a checkpoint keeps.
  std::vector<torch::Tensor> rng_states() const {
    std::vector<torch::Tensor> rng = {at::globalContext().defaultGenerator(at::kCPU).get_state()};
    if (device.is_cuda()) rng.push_back(at::globalContext().defaultGenerator(device).get_state());
    return rng;
  }
  // Every rank's rng_states(), rank 0's first: what a checkpoint keeps, since each rank draws its own
  // dropout masks. A collective: every rank calls it. (The states travel as int64, which every
  // communicator carries.)
  std::vector<torch::Tensor> all_rng_states() const {
    std::vector<torch::Tensor> mine = rng_states();
    if (world == 1) return mine;
    std::vector<int64_t> sizes;
    for (const auto& t : mine) sizes.push_back(t.numel());
    torch::Tensor bytes = torch::cat(mine);
    const int64_t n = (bytes.numel() + 7) / 8;
    torch::Tensor packed = torch::zeros({n * 8}, torch::kByte);
    packed.narrow(0, 0, bytes.numel()).copy_(bytes);
    torch::Tensor all = torch::empty({int64_t(world) * n}, torch::kLong);
    comm->all_gather(packed.view(torch::kLong), all);
    std::vector<torch::Tensor> out;
    for (int r = 0; r < world; ++r) {
      const torch::Tensor rank_bytes = all.narrow(0, r * n, n).view(torch::kByte);
      int64_t at = 0;
      for (const int64_t size : sizes) {
        out.push_back(rank_bytes.narrow(0, at, size).clone());
        at += size;
      }
    }
    return out;
  }

  // Restores this rank's generators from what all_rng_states() saved. A checkpoint of another number
  // of ranks (or of one, from before each rank kept its own) gives rank 0 its first rank's states and
  // seeds the others' afresh: training goes on, though not bit for bit as an unbroken run.
  void restore_rng_states(const std::vector<torch::Tensor>& saved, const std::string& dir) {
    const size_t k = rng_states().size();
    LLMTRAIN_CHECK(!saved.empty() && saved.size() % k == 0, "checkpoint ", dir, ": rng.pt holds ", saved.size(),
                   " generator states, not a multiple of the ", k, " each rank of this run keeps");
    const size_t ranks = saved.size() / k;
    if (ranks == size_t(world)) {
      set_rng_states({saved.begin() + long(rank * k), saved.begin() + long((rank + 1) * k)});
      return;
    }
    set_rng_states({saved.begin(), saved.begin() + long(k)});
    if (rank > 0) seed_rank_generators();
    if (rank == 0)
      std::printf("checkpoint %s holds the random generators of %zu rank(s), this run has %d: the ranks past the first "
                  "draw from fresh seeds (the run goes on, not bit for bit as an unbroken one)\n",
                  dir.c_str(), ranks, world);
  }

  // Ranks past the first draw their dropout masks from generators of their own (rank 0 keeps the
  // seed's, so one rank trains as a single process does).
  void seed_rank_generators() const {
    torch::manual_seed(cfg.train.seed ^ (0x9E3779B97F4A7C15ull * uint64_t(rank)));
  }

  void set_rng_states(const std::vector<torch::Tensor>& rng) const {
    const auto restore = [](at::Generator gen, const torch::Tensor& s) {  // a handle: shares the default one
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(s);
    };
    restore(at::globalContext().defaultGenerator(at::kCPU), rng.at(0));
    if (device.is_cuda() && rng.size() > 1) restore(at::globalContext().defaultGenerator(device), rng[1]);
  }

  std::string checkpoints_dir() const { return cfg.out_dir + "/checkpoints"; }

  // The configuration as the run folder and its checkpoints keep it: the tokenizer is their own copy.
  std::string stored_config() const {
    TrainerConfig stored = cfg;
    if (!cfg.tokenizer.kind.empty()) stored.tokenizer = run_tok;
    return stored.to_json();
  }

  // The section naming out_dir's copy of the tokenizer: the copy made earlier by this run (which must be
  // the tokenizer of this config), or none yet (sha256 empty: made when out_dir is written).
  TokenizerConfig own_tokenizer() const {
    TokenizerConfig own;
    own.kind = cfg.tokenizer.kind;
    own.path = copied_tokenizer_path(own.kind);
    if (!fs::exists(cfg.out_dir + "/tokenizer")) return own;
    const std::string want = tokenizer_sha256(cfg.tokenizer);
    TokenizerConfig at = own;
    at.path = cfg.out_dir + "/" + own.path;
    std::string have;
    try {
      have = tokenizer_sha256(at);
    } catch (const llmtrain::Error& e) {
      LLMTRAIN_CHECK(false, "out_dir ", cfg.out_dir, " holds an incomplete copy of its tokenizer (", e.what(), ")");
    }
    LLMTRAIN_CHECK(have == want, "out_dir ", cfg.out_dir, "/tokenizer holds the tokenizer this run was trained with ",
                   "(sha256 ", have, "), and this config's tokenizer ", cfg.tokenizer.kind, " ", cfg.tokenizer.path,
                   " differs (sha256 ", want, "): resume with the run's own (", cfg.out_dir, "/config.json names it)");
    own.sha256 = have;
    return own;
  }
  std::string metrics_path() const { return cfg.out_dir + "/metrics.jsonl"; }

  // Batches of `path`: shards (a glob) or SFT JSONL, whose tokenized examples `keep` then owns.
  std::unique_ptr<data::BatchSource> make_source(const std::string& path, bool shuffle,
                                                 std::unique_ptr<data::SFTDataset>& keep) const {
    if (cfg.sft()) {
      data::SFTOptions so;
      so.path = path;
      so.seq_len = cfg.train.seq_len;
      so.pack = cfg.data.pack;
      keep = std::make_unique<data::SFTDataset>(*tok, so);
      data::SFTLoader::Options lo;
      lo.batch_size = cfg.train.batch_size;
      lo.rank = rank;
      lo.world_size = world;
      lo.seed = cfg.train.seed;
      lo.shuffle = shuffle;
      lo.device = device;
      return std::make_unique<data::SFTLoader>(*keep, lo);
    }
    data::DataLoaderOptions o;
    o.pattern = path;
    o.batch_size = cfg.train.batch_size;
    o.seq_len = cfg.train.seq_len;
    o.rank = rank;
    o.world_size = world;
    o.seed = cfg.train.seed;
    o.shuffle = shuffle;
    o.shuffle_unit = cfg.data.shuffle_unit == "batch" ? data::ShuffleUnit::kBatch : data::ShuffleUnit::kWindow;
    o.vocab_size = cfg.model.gpt2().vocab_size();
    o.device = device;
    return std::make_unique<data::DataLoader>(o);
  }

  // The mean of a per-rank scalar over all ranks, on the device (one rank: v itself).
  torch::Tensor mean_over_ranks_tensor(torch::Tensor v) const {
    if (world == 1) return v;
    v = v.to(torch::kDouble).contiguous();
    comm->all_reduce_sum(v);
    return v / double(world);
  }
  double mean_over_ranks(torch::Tensor v) const { return mean_over_ranks_tensor(std::move(v)).item<double>(); }

  void append_metrics(const Json& record) {
    if (rank != 0) return;
    // Sample text may hold a UTF-8 character cut by the token limit: replaced, never an exception.
    fs::append_file(metrics_path(), record.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n");
  }

  // Records of steps after `last` belong to a run that stopped; the resumed run writes them anew.
  void keep_metrics_through(int64_t last) {
    if (rank != 0 || !fs::exists(metrics_path())) return;
    std::istringstream in(fs::read_file(metrics_path()));
    std::string kept, line;
    while (std::getline(in, line)) {
      try {
        const Json record = json::parse(line, metrics_path());
        if (record.is_object() && record.contains("step") && record["step"].is_number_integer() &&
            record["step"].get<int64_t>() <= last)
          kept += line + "\n";
      } catch (const llmtrain::Error&) {  // a line cut by a crash
      }
    }
    fs::write_file_atomic(metrics_path(), kept);
  }

  void load_initial_weights(const std::string& from) {
    nn::GPT2 src = load_model(from);
    LLMTRAIN_CHECK(same_shape(src->cfg, cfg.model.gpt2()), "model.init_from ", from, " holds a model of ",
                   shape_text(src->cfg), "; this config has ", shape_text(cfg.model.gpt2()));
    torch::NoGradGuard no_grad;
    const auto from_params = src->named_parameters();
    for (auto& p : model->named_parameters()) p.value().copy_(from_params[p.key()]);
  }

  // A sample from the model, printed and logged; its own seeded generator leaves the run's RNG alone.
  void write_sample() {
    std::vector<int32_t> prompt = cfg.sample.prompt.empty() ? std::vector<int32_t>{} : tok->encode(cfg.sample.prompt);
    if (prompt.empty()) {
      LLMTRAIN_CHECK(tok->eot_id().has_value(), "sample.prompt is empty and the tokenizer has no end-of-text id to start from");
      prompt = {*tok->eot_id()};
    }
    infer::SamplingOptions o;
    o.temperature = cfg.sample.temperature;
    o.top_k = cfg.sample.top_k;
    o.seed = cfg.train.seed + uint64_t(step);
    if (tok->eot_id()) o.stop_tokens = {*tok->eot_id()};
    // The KV cache holds block_size positions: a longer sample is cut there.
    const int64_t room = model->cfg.block_size() + 1 - int64_t(prompt.size());
    LLMTRAIN_CHECK(room >= 1, "sample.prompt is ", prompt.size(), " tokens, longer than the model's block_size ",
                   model->cfg.block_size());
    auto ids = infer::generate(model, prompt, std::min<int64_t>(cfg.sample.tokens, room), o);
    // Decoded as one piece (token by token would lose SentencePiece's spaces), without the end-of-text
    // ids that start and end a fresh document.
    if (cfg.sample.prompt.empty()) ids.erase(ids.begin());
    if (!ids.empty() && tok->eot_id() && ids.back() == *tok->eot_id()) ids.pop_back();
    const std::string text = tokenizer::printable_utf8(tok->decode(ids));
    append_metrics({{"type", "sample"}, {"step", step}, {"text", text}});
    if (rank == 0 && !cfg.train.quiet) std::printf("step %lld sample: %s\n", static_cast<long long>(step), text.c_str());
  }

  void write_loss_curves() const {
    if (rank != 0 || !fs::exists(metrics_path())) return;
    fs::write_file_atomic(cfg.out_dir + "/loss.svg", loss_curves_svg(fs::read_file(metrics_path()), cfg.out_dir));
  }
};

Trainer::Trainer(TrainerConfig config, std::shared_ptr<dist::Communicator> comm) : impl_(std::make_unique<Impl>()) {
  Impl& d = *impl_;
  d.cfg = std::move(config);
  d.comm = std::move(comm);
  if (d.comm) {
    d.rank = d.comm->rank();
    d.world = d.comm->world_size();
  }
  const auto& c = d.cfg;
  d.device = resolve_device(c.device);
  if (d.comm && d.device.is_cuda()) {  // a GPU a rank; the ranks' gradients travel over NCCL
    d.device = torch::Device(torch::kCUDA, int8_t(dist::local_rank() % int(torch::cuda::device_count())));
    if (!std::dynamic_pointer_cast<dist::NcclCommunicator>(d.comm))
      d.comm = dist::NcclCommunicator::create(d.comm, d.device);  // makes it the current device
  }
  LLMTRAIN_CHECK(!c.data.train.empty(), "data.train is empty: give a glob of training shards or an SFT JSONL file");
  if (d.rank == 0) check_run_folder(c, /*force=*/false);  // before anything is loaded or written
  const int64_t micro = product_checked({c.train.batch_size, c.train.seq_len, d.world},  // tokens a micro-step, all ranks
                                        "train.batch_size x train.seq_len x ranks");
  const int64_t total = c.train.total_batch_tokens > 0 ? c.train.total_batch_tokens : micro;
  LLMTRAIN_CHECK(total % micro == 0, "train.total_batch_tokens ", total,
                 " is not a multiple of batch_size x seq_len x ranks = ", micro);
  d.accum = total / micro;
  if (!c.tokenizer.kind.empty()) {
    d.tok = load_tokenizer(c.tokenizer);
    if (d.rank == 0) d.run_tok = d.own_tokenizer();
    LLMTRAIN_CHECK(d.tok->vocab_size() <= c.model.gpt2().vocab_size(), "tokenizer ", c.tokenizer.kind, " ",
                   c.tokenizer.path, " has ", d.tok->vocab_size(), " ids, more than the model's vocab_size ",
                   c.model.gpt2().vocab_size());
    // Found now, not after the steps before the first sample.
    if (c.sample.every > 0 && !c.sample.prompt.empty()) {
      const int64_t n = int64_t(d.tok->encode(c.sample.prompt).size());
      LLMTRAIN_CHECK(n < c.model.gpt2().block_size(), "sample.prompt is ", n,
                     " tokens, which leaves no room for a new one in the model's block_size ",
                     c.model.gpt2().block_size());
    }
  }

  check_memory(c, d.device, d.world);
  d.peak_flops = peak_flops(d.device);
  torch::manual_seed(c.train.seed);
  d.model = nn::GPT2(c.model.gpt2());
  if (!c.model.init_from.empty()) d.load_initial_weights(c.model.init_from);
  d.model->to(d.device);
  d.opt = std::make_unique<optim::MixedPrecisionOptimizer>(*d.model, c.optimizer());
  LLMTRAIN_CHECK(!c.train.zero || d.comm, "train.zero shards the optimizer over data-parallel ranks, and this run ",
                 "has no communicator: start it under mpirun (train_gpt2 makes one there) or set train.zero=false");
  if (d.comm) {  // one rank too: the same path as many
    dist::DataParallelOptions o;
    o.bucket_bytes = c.train.bucket_mb << 20;
    o.shard_optimizer = c.train.zero;
    d.dp = std::make_unique<dist::DataParallel>(d.model->parameters(), d.comm, o);
    if (c.train.zero) shard_optimizer(*d.opt, *d.dp, d.comm);
  }
  d.train = d.make_source(c.data.train, c.data.shuffle, d.sft_train);
  // Evaluation always reads the same batches: the val data (else the train data) in file order.
  d.val = d.make_source(c.data.val.empty() ? c.data.train : c.data.val, false, d.sft_val);

  if (d.rank == 0) {
    fs::make_dirs(c.out_dir);
    if (!fs::is_our_output(c.out_dir)) fs::mark_output(c.out_dir, "run");
    if (!c.tokenizer.kind.empty() && d.run_tok.sha256.empty()) d.run_tok = copy_tokenizer(c.tokenizer, c.out_dir);
  }
  if (d.rank > 0) d.seed_rank_generators();
  g_stop = false;
  struct sigaction sa{};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  ::sigaction(SIGINT, &sa, &d.old_int);
  ::sigaction(SIGTERM, &sa, &d.old_term);
}

Trainer::~Trainer() {
  ::sigaction(SIGINT, &impl_->old_int, nullptr);
  ::sigaction(SIGTERM, &impl_->old_term, nullptr);
}

int64_t Trainer::step() const { return impl_->step; }
nn::GPT2& Trainer::model() { return impl_->model; }
const TrainerConfig& Trainer::config() const { return impl_->cfg; }
int64_t Trainer::grad_accum_steps() const { return impl_->accum; }
void Trainer::on_step(std::function<void(const StepRecord&)> callback) { impl_->callback = std::move(callback); }
void Trainer::request_stop() { impl_->stop_requested = true; }

double Trainer::evaluate() {
  Impl& d = *impl_;
  d.model->eval();
  torch::NoGradGuard no_grad;
  d.val->load_state({0, 0, 0});
  torch::Tensor sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(d.device));
  for (int64_t i = 0; i < d.cfg.eval.batches; ++i) {
    const auto b = d.val->next();
    optim::AutocastScope amp(d.device.type(), d.opt->options().precision);
    sum += d.model->loss(b.inputs, b.targets, b.positions).to(torch::kDouble);
  }
  d.model->train();
  const double mean = d.mean_over_ranks(sum) / double(d.cfg.eval.batches);
  d.model->check_inputs();  // the device has finished: free
  return mean;
}

int64_t Trainer::run() {
  Impl& d = *impl_;
  const auto& c = d.cfg;
  const bool log = d.rank == 0 && !c.train.quiet;
  const bool tty = log && ::isatty(STDOUT_FILENO);
  const int64_t print_every = std::max<int64_t>(1, c.train.max_steps / 20);
  const int64_t step_tokens = d.accum * c.train.batch_size * c.train.seq_len * d.world;
  const double flops_per_token = d.model->flops_per_token(c.train.seq_len);
  const auto start = std::chrono::steady_clock::now();
  int64_t last_eval = -1;
  const auto stop_now = [&] {  // every rank stops after the same step
    double stop = (g_stop || d.stop_requested) ? 1.0 : 0.0;
    if (d.world > 1) stop = d.mean_over_ranks(torch::tensor(stop, torch::kDouble));
    return stop > 0;
  };
  if (d.dp) {  // every rank goes on from rank 0's weights
    if (d.world > 1) check_same_config(c, *d.comm);
    torch::NoGradGuard no_grad;
    d.dp->broadcast_parameters(0);
    // Sharded masters are each rank's own slices (made from the same seeded weights on every rank).
    if (d.opt->options().precision == optim::Precision::kBF16Master && !d.opt->sharded())
      for (torch::Tensor m : d.opt->master_params()) d.comm->broadcast(m, 0);  // a handle: same storage
  }
  // Written here, not at construction: a resume that is refused leaves the run's config as it was.
  if (d.rank == 0) fs::write_file_atomic(c.out_dir + "/config.json", d.stored_config());
  d.model->train();
  // Not on several ranks: DataParallel's reductions start from backward's hooks, on the host. Not for
  // packed SFT: its position ids would be one more input, and its embedding checks ids on the host.
  if (!d.graph && !d.dp && d.device.is_cuda() && c.train.cuda_graph && !(c.sft() && c.data.pack) &&
      d.opt->options().precision != optim::Precision::kFP16)
    d.graph = std::make_unique<GraphedStep>(d.model->parameters(), [&d](const torch::Tensor& x, const torch::Tensor& y) {
      return d.micro_step(x, y, {});  // not fp16: its loss scale changes from step to step
    });
  // A step's record waits for its loss and grad norm, which travel to the host behind its work: on one
  // rank it is written once the next step's forward and backward are queued, so that the device never
  // waits for the host between steps. Steps that evaluate, sample, checkpoint or end the run, and
  // every step on several ranks (whose stop check synchronises anyway), are recorded at once.
  struct Queued {
    int64_t step;
    HostCopy loss;  // the summed micro-step losses, averaged over ranks
    std::optional<std::chrono::steady_clock::time_point> done;  // the CPU's: when its work ended
  };
  std::optional<Queued> queued;
  // A step's time is its own: from the end of the step before (or of the evaluation, sample or
  // checkpoint after it) to the end of its work. On the CPU the work is done when the step is queued;
  // on a GPU when its loss reaches the host, which waits for it behind the next step's work.
  auto t_last = start;
  // The progress line's tok/s and ETA: the tokens and seconds of the steps since the line was last
  // printed (tty: the last print_every steps), and of every step this process did; pauses apart.
  std::deque<double> window;
  double window_s = 0, steps_s = 0;
  int64_t steps_timed = 0;
  double eval_s = 0, sample_s = 0, checkpoint_s = 0;  // the last of each, for the ETA
  const auto record = [&](bool wait_for_checks) {  // the queued step's record: metrics, progress, callback
    const auto info = d.opt->finish_step();
    StepRecord r;
    r.step = queued->step;
    r.loss = queued->loss.get().item<double>() / double(d.accum);
    const auto queued_done = queued->done;
    queued.reset();
    d.model->check_inputs(wait_for_checks);  // bad token ids the recorded step's kernels saw
    const auto now = std::chrono::steady_clock::now();
    const auto done = queued_done.value_or(now);
    const double dt = std::max(1e-9, std::chrono::duration<double>(done - t_last).count());
    const double run_s = std::chrono::duration<double>(now - start).count();
    t_last = done;
    r.lr = info.lr;
    r.grad_norm = info.grad_norm;
    r.skipped = info.skipped;
    r.loss_scale = info.loss_scale;
    r.tokens_per_s = double(step_tokens) / dt;
    r.elapsed_s = d.elapsed_before + run_s;
    if (d.peak_flops > 0) r.mfu = r.tokens_per_s * flops_per_token / (d.peak_flops * d.world);
    Json line = {{"type", "train"}, {"step", r.step}, {"loss", r.loss}, {"lr", r.lr}, {"grad_norm", r.grad_norm},
                 {"tokens_per_s", r.tokens_per_s}, {"elapsed_s", r.elapsed_s}};
    if (d.peak_flops > 0) line["mfu"] = r.mfu;
    if (r.skipped) line["skipped"] = true;
    if (d.opt->options().precision == optim::Precision::kFP16) line["loss_scale"] = r.loss_scale;
    d.append_metrics(line);

    window.push_back(dt);
    window_s += dt;
    if (tty && int64_t(window.size()) > print_every) {
      window_s -= window.front();
      window.pop_front();
    }
    steps_s += dt;
    ++steps_timed;
    // The rest of the run at this process's pace: its steps, and its evaluations, samples and
    // checkpoints still due, each as long as the last one.
    const int64_t left = c.train.max_steps - r.step;
    const auto due_after = [&](int64_t every) { return every > 0 ? c.train.max_steps / every - r.step / every : 0; };
    const double eta = steps_s / double(steps_timed) * double(left) + eval_s * double(due_after(c.eval.every)) +
                       sample_s * double(due_after(c.sample.every)) +
                       checkpoint_s * double(due_after(c.checkpoint.every));
    const double shown_tps = double(step_tokens) * double(window.size()) / window_s;
    char progress[192];
    int n = std::snprintf(progress, sizeof progress, "step %lld/%lld | loss %.4f | lr %.2e | %.1fK tok/s",
                          static_cast<long long>(r.step), static_cast<long long>(c.train.max_steps), r.loss, r.lr,
                          shown_tps / 1e3);
    if (d.peak_flops > 0) n += std::snprintf(progress + n, sizeof progress - n, " | MFU %.1f%%", 100 * r.mfu);
    std::snprintf(progress + n, sizeof progress - n, " | ETA %s", format_duration(eta).c_str());
    if (tty) {
      std::printf("\r%-110s", progress);
    } else if (log && (r.step % print_every == 0 || r.step == c.train.max_steps)) {
      std::printf("%s\n", progress);
    }
    if (!tty && (r.step % print_every == 0 || r.step == c.train.max_steps)) {  // the next line averages anew
      window.clear();
      window_s = 0;
    }
    std::fflush(stdout);
    if (d.callback) d.callback(r);
    // Test hook: "train:throw:rankR" makes rank R fail at step 3, as bad data or a full disk on one rank would.
    if (r.step == 3 && llmtrain::detail::failpoint_set(("train:throw:rank" + std::to_string(d.rank)).c_str()))
      throw Error("failpoint train:throw:rank" + std::to_string(d.rank) + " at step 3");
  };
  const auto due = [](int64_t every, int64_t step) { return every > 0 && step % every == 0; };
  while (d.step < c.train.max_steps && !stop_now()) {
    // Where this step starts from, should a stop asked for in the queued step's record drop it.
    struct Start {
      data::DataLoaderState loader;
      std::vector<torch::Tensor> rng;
    };
    const std::optional<Start> before = queued ? std::optional<Start>(Start{d.train->state(), d.rng_states()})
                                               : std::nullopt;
    torch::Tensor loss_sum;
    if (d.dp) d.dp->zero_grad();
    for (int64_t micro = 0; micro < d.accum; ++micro) {
      if (d.dp) d.dp->set_sync(micro == d.accum - 1);  // the step's last backward averages over the ranks
      const auto batch = d.train->next();
      const torch::Tensor loss = d.graph ? d.graph->run(batch.inputs, batch.targets, /*first=*/micro == 0)
                                         : d.micro_step(batch.inputs, batch.targets, batch.positions);
      loss_sum = loss_sum.defined() ? loss_sum + loss : loss.clone();  // a graph's loss: overwritten by its next replay
    }
    if (d.dp) d.dp->finish();  // the gradients' mean over the ranks, before unscaling and clipping
    if (queued) {
      record(/*wait_for_checks=*/false);
      if (g_stop || d.stop_requested) {  // asked during the previous step's record: this step is dropped
        d.opt->zero_grad();
        d.train->load_state(before->loader);
        d.set_rng_states(before->rng);
        break;
      }
    }
    d.opt->queue_step(d.step);
    queued = Queued{++d.step, HostCopy(d.mean_over_ranks_tensor(loss_sum)), std::nullopt};
    if (!d.device.is_cuda()) queued->done = std::chrono::steady_clock::now();
    const bool eval_now = due(c.eval.every, d.step), sample_now = due(c.sample.every, d.step),
               checkpoint_now = due(c.checkpoint.every, d.step);
    if (d.world > 1 || eval_now || sample_now || checkpoint_now || d.step == c.train.max_steps)
      record(/*wait_for_checks=*/true);

    const auto timed = [&](double& seconds, auto&& body) {  // a pause: its time is no step's
      const auto t0 = std::chrono::steady_clock::now();
      body();
      const auto t1 = std::chrono::steady_clock::now();
      seconds = std::chrono::duration<double>(t1 - t0).count();
      t_last = std::max(t_last, t1);
    };
    if (eval_now) timed(eval_s, [&] {
        const double v = evaluate();
        d.append_metrics({{"type", "eval"}, {"step", d.step}, {"val_loss", v}});
        if (log) std::printf("%sstep %lld: val loss %.4f\n", tty ? "\n" : "", static_cast<long long>(d.step), v);
        last_eval = d.step;
      });
    if (sample_now) timed(sample_s, [&] {
        if (tty && last_eval != d.step) std::printf("\n");
        d.write_sample();
      });
    if (checkpoint_now) timed(checkpoint_s, [&] { save_checkpoint(); });
  }
  if (queued) record(/*wait_for_checks=*/true);  // the loop stopped before the next step began
  if (tty) std::printf("\n");
  const bool interrupted = d.step < c.train.max_steps;
  if (interrupted) {
    if (log) std::printf("stopping at step %lld: writing a checkpoint\n", static_cast<long long>(d.step));
    if (d.saved_step != d.step) save_checkpoint();
    d.write_loss_curves();
    return d.step;
  }
  if (last_eval != d.step) {
    const double v = evaluate();
    d.append_metrics({{"type", "eval"}, {"step", d.step}, {"val_loss", v}});
    if (log) std::printf("step %lld: val loss %.4f\n", static_cast<long long>(d.step), v);
  }
  if (c.checkpoint.every > 0 && d.saved_step != d.step) save_checkpoint();
  d.write_loss_curves();
  return d.step;
}

void shard_optimizer(optim::MixedPrecisionOptimizer& opt, dist::DataParallel& dp,
                     std::shared_ptr<dist::Communicator> comm) {
  optim::ParameterShard s;
  for (const auto& x : dp.shard()) s.slices.push_back({x.param, x.offset, x.length, x.grad, x.value});
  s.sum_over_ranks = [comm = std::move(comm)](torch::Tensor& t) { comm->all_reduce_sum(t); };
  s.gather = [&dp] { dp.gather_parameters(); };
  opt.shard(std::move(s));
}

void Trainer::save_checkpoint() {
  Impl& d = *impl_;
  d.saved_step = d.step;  // on every rank, so that all agree on whether a save is due (a failed one throws)
  const std::vector<torch::Tensor> rng = d.all_rng_states();  // every rank takes part
  const bool sharded = d.opt->sharded();
  if (d.rank != 0 && !sharded) {  // rank 0 writes; the others wait so that no rank runs ahead of a checkpoint
    d.comm->barrier();
    return;
  }
  const std::string dir = d.checkpoints_dir(), final_dir = dir + "/" + step_name(d.step);
  torch::Tensor pid = torch::tensor({int64_t(::getpid())}, torch::kLong);  // rank 0's names the folder
  if (d.rank == 0) {
    const std::string tmp = final_dir + ".tmp." + std::to_string(pid.item<int64_t>());
    fs::remove_tree(tmp);  // ours: a folder of this process's name, left by an earlier failed save
    fs::make_dirs(tmp);
  }
  if (sharded && d.world > 1) d.comm->broadcast(pid, 0);  // after rank 0 made the folder
  const std::string tmp = final_dir + ".tmp." + std::to_string(pid.item<int64_t>());
  const bool masters = d.opt->options().precision == optim::Precision::kBF16Master;
  try {
    if (sharded) {  // ZeRO-1: every rank writes its own slices' optimizer state
      LLMTRAIN_CHECK(fs::exists(tmp), "rank ", d.rank, " cannot see the checkpoint folder ", tmp, " that rank 0 made: ",
                     "with train.zero every rank writes its part there, so out_dir must be on a filesystem all ranks share");
      save_torch(d.opt->adamw(), tmp + "/" + shard_file("optimizer", d.rank));
      if (masters) save_torch(d.opt->master_params(), tmp + "/" + shard_file("master", d.rank));
      if (d.world > 1) d.comm->barrier();  // every shard is on disk before rank 0 completes the folder
      if (d.rank != 0) {
        d.comm->barrier();
        return;
      }
    }
    save_torch(d.model, tmp + "/model.pt");
    if (!sharded) {
      save_torch(d.opt->adamw(), tmp + "/optimizer.pt");
      if (masters) save_torch(d.opt->master_params(), tmp + "/master.pt");
    }
    save_torch(rng, tmp + "/rng.pt");
    if (!d.cfg.tokenizer.kind.empty()) copy_tokenizer(tokenizer_in(d.run_tok, d.cfg.out_dir), tmp);
    llmtrain::detail::failpoint("checkpoint:tensors-written");
    const auto loader = d.train->state();
    detail::CheckpointState state;
    state.step = d.step;
    state.elapsed_s = d.elapsed_before;
    state.model = d.cfg.model.gpt2();
    state.precision = d.cfg.train.precision;
    state.zero_ranks = sharded ? d.world : 0;
    state.loss_scale = d.opt->scaler().scale_value();
    state.good_steps = d.opt->scaler().good_steps();
    state.epoch = loader.epoch;
    state.shard = loader.shard;
    state.position = loader.position;
    state.config = d.stored_config();
    fs::write_file_atomic(tmp + "/state.json", state.to_json());  // last: marks the folder complete
    llmtrain::detail::failpoint("checkpoint:complete");
    // A checkpoint of this step already there (saved again at the step a run resumed from) is swapped
    // out whole, never removed first.
    fs::replace_dir(tmp, final_dir);
  } catch (...) {
    if (d.rank == 0) fs::remove_tree(tmp);  // a failed save (a full disk) leaves the earlier checkpoints alone
    throw;
  }
  llmtrain::detail::failpoint("checkpoint:renamed");
  const auto all = list_checkpoints(dir);
  for (size_t i = 0; i + size_t(d.cfg.checkpoint.keep) < all.size(); ++i) fs::remove_tree(all[i].second);
  if (d.world > 1) d.comm->barrier();
}

bool Trainer::resume_if_possible() {
  Impl& d = *impl_;
  d.graph.reset();  // loading may give the parameters new storage, which a captured graph would not see
  if (d.rank == 0) remove_stale_checkpoints(d.checkpoints_dir());
  const auto all = list_checkpoints(d.checkpoints_dir());
  if (all.empty()) {
    d.keep_metrics_through(0);  // a run that stopped before its first checkpoint starts over
    return false;
  }
  const std::string dir = all.back().second;
  const detail::CheckpointState state = read_state(dir);
  LLMTRAIN_CHECK(!state.model_only, "checkpoint ", dir, " holds a model alone (converted), not a ",
                 "run to resume: start a run from it with model.init_from or finetune_gpt2 --from");
  LLMTRAIN_CHECK(same_shape(state.model, d.cfg.model.gpt2()), "checkpoint ", dir, " holds a model of ",
                 shape_text(state.model), "; this config has ", shape_text(d.cfg.model.gpt2()));
  LLMTRAIN_CHECK(state.precision == d.cfg.train.precision, "checkpoint ", dir, " was trained in ", state.precision,
                 "; this config asks for ", d.cfg.train.precision);
  const bool sharded = d.opt->sharded();
  const int64_t zero_ranks = state.zero_ranks, want_ranks = sharded ? d.world : 0;
  LLMTRAIN_CHECK(zero_ranks == want_ranks, "checkpoint ", dir, " holds ",
                 zero_ranks > 0 ? "optimizer state sharded over " + std::to_string(zero_ranks) + " ranks (ZeRO-1)"
                                : std::string("unsharded optimizer state"),
                 "; this run ",
                 sharded ? "shards it over " + std::to_string(d.world) + " ranks" : std::string("does not shard it"),
                 ": resume with ", zero_ranks > 0 ? "train.zero=true on " + std::to_string(zero_ranks) + " ranks"
                                                  : std::string("train.zero=false"));
  // The shape, precision and sharding are named above as such; the other keys here.
  check_resumed_config(TrainerConfig::parse(state.config, "checkpoint " + dir + "/state.json's config"), d.cfg, dir,
                       d.rank == 0 && !d.cfg.train.quiet);
  const auto load = [&](const std::string& file, auto&& body) { load_part(dir, file.c_str(), body); };
  load("model.pt", [&](const std::string& p) { torch::load(d.model, p); });
  if (sharded) d.dp->load_shard_values();  // the slices' values (fp32: the masters) from the loaded weights
  const std::string opt_file = sharded ? shard_file("optimizer", d.rank) : "optimizer.pt",
                    master_file = sharded ? shard_file("master", d.rank) : "master.pt";
  load(opt_file, [&](const std::string& p) { torch::load(d.opt->adamw(), p); });
  if (d.opt->options().precision == optim::Precision::kBF16Master) {
    load(master_file, [&](const std::string& p) {
      std::vector<torch::Tensor> masters;
      torch::load(masters, p);
      const auto& want = d.opt->master_params();
      LLMTRAIN_CHECK(masters.size() == want.size(), "checkpoint ", dir, ": ", master_file, " holds ", masters.size(),
                     " tensors, expected ", want.size());
      for (size_t i = 0; i < masters.size(); ++i)
        LLMTRAIN_CHECK(masters[i].sizes() == want[i].sizes(), "checkpoint ", dir, ": ", master_file, " tensor ", i,
                       " has shape ", masters[i].sizes(), ", expected ", want[i].sizes());
      torch::NoGradGuard no_grad;
      // model.pt holds the bf16 copies as they were rounded (stochastically): they stay as loaded.
      for (size_t i = 0; i < masters.size(); ++i) d.opt->master_params()[i].copy_(masters[i]);
    });
  }
  load("rng.pt", [&](const std::string& p) {
    std::vector<torch::Tensor> rng;
    torch::load(rng, p);
    d.restore_rng_states(rng, dir);
  });
  d.step = state.step;
  d.elapsed_before = state.elapsed_s;
  d.opt->scaler().set_state(state.loss_scale, state.good_steps);
  try {
    d.train->load_state({state.epoch, state.shard, state.position});
  } catch (const llmtrain::Error& e) {
    LLMTRAIN_CHECK(false, "checkpoint ", dir, "/state.json: train_loader does not fit this run's data: ", e.what());
  }

  d.saved_step = d.step;
  d.keep_metrics_through(d.step);
  if (d.rank == 0 && !d.cfg.train.quiet) std::printf("resumed from %s (step %lld)\n", dir.c_str(), static_cast<long long>(d.step));
  return true;
}

namespace {

// The checkpoint folder `path` names: itself, or a run folder's newest complete checkpoint.
std::string checkpoint_dir(const std::string& path) {
  if (fs::exists(path + "/state.json")) return path;
  const auto all = list_checkpoints(path + "/checkpoints");
  LLMTRAIN_CHECK(!all.empty(), path, " is neither a checkpoint folder (with state.json) nor a run folder with checkpoints/");
  return all.back().second;
}

}  // namespace

TrainerConfig load_checkpoint_config(const std::string& path) {
  const std::string dir = checkpoint_dir(path);
  const detail::CheckpointState state = read_state(dir);
  TrainerConfig cfg = TrainerConfig::parse(state.config, "checkpoint " + dir + "/state.json's config");
  cfg.tokenizer = tokenizer_in(cfg.tokenizer, dir);  // the checkpoint's own copy
  LLMTRAIN_CHECK(same_shape(state.model, cfg.model.gpt2()), "checkpoint ", dir, "/state.json: model says ",
                 shape_text(state.model), " but its config says ", shape_text(cfg.model.gpt2()));
  return cfg;
}

namespace {

// A run's configuration with the model of `g` (the rest the defaults) and GPT-2's tokenizer.
TrainerConfig config_of_model(const nn::GPT2Config& g) {
  LLMTRAIN_CHECK(g.layer_norm_eps() == nn::GPT2Config().layer_norm_eps(), "a model with layer_norm_epsilon ",
                 g.layer_norm_eps(), " has no llmtrain checkpoint form (its configs keep GPT-2's ",
                 nn::GPT2Config().layer_norm_eps(), ")");
  TrainerConfig c;
  c.model.n_layer = g.n_layer();
  c.model.n_head = g.n_head();
  c.model.n_embd = g.n_embd();
  c.model.block_size = g.block_size();
  c.model.vocab_size = g.vocab_size();
  c.model.dropout = g.dropout();
  c.tokenizer.kind = "gpt2";
  c.train.seq_len = std::min(c.train.seq_len, g.block_size());  // the default must fit the model
  return c;
}

// The configuration a fine-tuning run starts from: a checkpoint's, or the model of a Hugging Face folder
// or an llm.c file.
TrainerConfig source_config(const std::string& from) {
  if (io::is_hf_dir(from)) return config_of_model(io::hf_gpt2_config(from));
  if (io::is_llmc_file(from)) return config_of_model(io::llmc_gpt2_config(from));
  return load_checkpoint_config(from);
}

}  // namespace

nn::GPT2 load_model(const std::string& path) {
  if (io::is_hf_dir(path)) return io::load_hf_gpt2(path);
  if (io::is_llmc_file(path)) return io::load_llmc_gpt2(path);
  return load_checkpoint_model(path);
}

std::optional<TokenizerConfig> model_tokenizer(const std::string& path) {
  if (io::is_hf_dir(path)) {
    TokenizerConfig t;
    if (fs::exists(path + "/tokenizer.model")) t = {"sentencepiece", path + "/tokenizer.model", ""};
    else if (fs::exists(path + "/vocab.json") && fs::exists(path + "/merges.txt")) t = {"gpt2", path, ""};
    else return std::nullopt;
    return t;
  }
  if (io::is_llmc_file(path)) return std::nullopt;
  const TrainerConfig cfg = load_checkpoint_config(path);
  if (cfg.tokenizer.kind.empty()) return std::nullopt;
  return cfg.tokenizer;
}

void save_model_checkpoint(nn::GPT2& model, const std::string& dir, const fs::OutputOptions& options,
                           const std::optional<TokenizerConfig>& tokenizer) {
  const TrainerConfig cfg = config_of_model(model->cfg);
  const bool bf16 = model->parameters().front().scalar_type() == torch::kBFloat16;
  fs::write_dir_atomic(dir, "checkpoint", options, [&](const std::string& tmp) {
    save_torch(model, tmp + "/model.pt");
    TrainerConfig c = cfg;
    if (tokenizer) c.tokenizer = copy_tokenizer(*tokenizer, tmp);
    if (bf16) c.train.precision = "bf16-master";  // how load_checkpoint_model knows to cast
    detail::CheckpointState state;
    state.model_only = true;
    state.model = model->cfg;
    state.precision = c.train.precision;
    state.config = c.to_json();
    fs::write_file_atomic(tmp + "/state.json", state.to_json());
  });
}

void save_hf_model(nn::GPT2& model, const std::string& dir, const fs::OutputOptions& options,
                   const std::optional<TokenizerConfig>& tokenizer) {
  io::HfExtras extras;
  if (!tokenizer) {
    io::save_hf_gpt2(model, dir, options, extras);
    return;
  }
  const auto tok = load_tokenizer(*tokenizer);
  LLMTRAIN_CHECK(tok->vocab_size() <= model->cfg.vocab_size(), "tokenizer ", tokenizer->kind, " ", tokenizer->path,
                 " has ", tok->vocab_size(), " ids, more than the model's vocab_size ", model->cfg.vocab_size());
  // llmtrain's documents start and end with the end-of-text id: it is both bos and eos.
  extras.bos_id = extras.eos_id = tok->eot_id() ? std::optional<int64_t>(*tok->eot_id()) : std::nullopt;
  const std::string eot = tok->eot_text().value_or("");
  extras.write = [&](const std::string& tmp) {
    const auto files = tokenizer::tokenizer_files(tokenizer->kind, tokenizer->path);
    Json config = {{"model_max_length", model->cfg.block_size()}, {"clean_up_tokenization_spaces", false}};
    if (tokenizer->kind == "gpt2") {
      fs::write_file_atomic(tmp + "/vocab.json", fs::read_file(files[0], uint64_t(1) << 30, "tokenizer"));
      fs::write_file_atomic(tmp + "/merges.txt", fs::read_file(files[1], uint64_t(1) << 30, "tokenizer"));
      config.update({{"tokenizer_class", "GPT2Tokenizer"}, {"add_prefix_space", false}, {"unk_token", eot}});
    } else {
      fs::write_file_atomic(tmp + "/tokenizer.model", fs::read_file(files[0], uint64_t(1) << 30, "tokenizer"));
      // A SentencePiece model as llmtrain encodes with it: no bos or eos added to the text.
      config.update({{"tokenizer_class", "LlamaTokenizer"}, {"add_bos_token", false}, {"add_eos_token", false},
                     {"legacy", true}});
    }
    if (!eot.empty()) config.update({{"bos_token", eot}, {"eos_token", eot}, {"pad_token", eot}});
    fs::write_file_atomic(tmp + "/tokenizer_config.json", config.dump(2) + "\n");
    Json special = Json::object();
    if (!eot.empty()) special = {{"bos_token", eot}, {"eos_token", eot}, {"pad_token", eot}};
    fs::write_file_atomic(tmp + "/special_tokens_map.json", special.dump(2) + "\n");
  };
  io::save_hf_gpt2(model, dir, options, extras);
}

nn::GPT2 load_checkpoint_model(const std::string& path) {
  const std::string dir = checkpoint_dir(path);
  const auto cfg = load_checkpoint_config(dir);
  // The shape comes from state.json: model.pt must be able to hold it before anything is allocated.
  uint64_t bytes = 0;
  ::close(fs::open_regular(dir + "/model.pt", &bytes, "checkpoint"));
  const int64_t params = cfg.model.gpt2().stored_parameters();
  const uint64_t least = uint64_t(params) * (cfg.train.precision == "bf16-master" ? 2 : 4);
  LLMTRAIN_CHECK(bytes >= least, "checkpoint ", dir, ": model.pt holds ", bytes, " bytes, too few for the ", params,
                 " parameters its state.json describes (", least, " bytes at least)");
  nn::GPT2 model(cfg.model.gpt2());
  if (cfg.train.precision == "bf16-master") model->to(torch::kBFloat16);
  load_part(dir, "model.pt", [&](const std::string& p) { torch::load(model, p); });
  return model;
}

TrainerConfig finetune_config(const std::string& from, const std::string& config_path,
                              const std::vector<std::string>& overrides) {
  const Json base = json::parse(source_config(from).to_json(), "the config of " + from);
  Json doc = json::parse_file(config_path, uint64_t(64) << 20);
  LLMTRAIN_CHECK(doc.is_object(), config_path, ": expected a JSON object at the top");
  Json model = base["model"];
  if (doc.contains("model")) {
    LLMTRAIN_CHECK(doc["model"].is_object(), config_path, ": model must be an object");
    for (const auto& [key, value] : doc["model"].items()) {
      LLMTRAIN_CHECK(key == "dropout", config_path, ": model.", key,
                     " cannot be set when fine-tuning: the model is the checkpoint's (only model.dropout may change)");
      model[key] = value;
    }
  }
  model["init_from"] = from;
  doc["model"] = model;
  if (!doc.contains("tokenizer")) {
    doc["tokenizer"] = base["tokenizer"];
    if (const auto own = model_tokenizer(from))  // a checkpoint's copy, a Hugging Face folder's files
      doc["tokenizer"] = {{"kind", own->kind}, {"path", own->path}, {"sha256", own->sha256}};
  }
  return TrainerConfig::parse(doc.dump(), config_path, overrides);
}

int64_t run_training(const TrainerConfig& cfg, const RunOptions& options, std::shared_ptr<dist::Communicator> comm) {
  const int rank = comm ? comm->rank() : 0, world = comm ? comm->world_size() : 1;
  try {
    if (rank == 0) {
      check_run_folder(cfg, options.force);
      // --force adopts the folder as a run folder, so that the Trainer writes its files there.
      if (options.force && fs::is_dir(cfg.out_dir) && !fs::is_our_output(cfg.out_dir)) fs::mark_output(cfg.out_dir, "run");
    }
    const bool used = fs::exists(cfg.out_dir + "/checkpoints") || fs::exists(cfg.out_dir + "/metrics.jsonl");
    LLMTRAIN_CHECK(options.resume || !used, "out_dir ", cfg.out_dir,
                   " already holds a run; pass --resume to continue it, or choose another out_dir");
    Trainer trainer(cfg, comm);
    const bool resumed = !options.resume || trainer.resume_if_possible();
    const bool say = rank == 0 && !cfg.train.quiet;
    if (say && !resumed)
      std::printf(used ? "out_dir %s holds no complete checkpoint (its run stopped before the first one): starting over "
                         "from step 0\n"
                       : "no checkpoint in %s: starting from step 0\n",
                  cfg.out_dir.c_str());
    const auto& m = trainer.model()->cfg;
    if (say) {
      std::printf("GPT-2 %lld layers x %lld wide, %.1fM parameters%s%s; %lld tokens per step (%lld micro-steps%s); "
                  "out_dir %s\n",
                  static_cast<long long>(m.n_layer()), static_cast<long long>(m.n_embd()),
                  double(trainer.model()->num_parameters()) / 1e6, cfg.model.init_from.empty() ? "" : " from ",
                  cfg.model.init_from.c_str(),
                  static_cast<long long>(world * trainer.grad_accum_steps() * cfg.train.batch_size * cfg.train.seq_len),
                  static_cast<long long>(trainer.grad_accum_steps()),
                  world > 1 ? (" on each of " + std::to_string(world) + " ranks").c_str() : "", cfg.out_dir.c_str());
    }
    const int64_t step = trainer.run();
    if (say)
      std::printf("done at step %lld; metrics in %s/metrics.jsonl, loss curves in %s/loss.svg\n",
                  static_cast<long long>(step), cfg.out_dir.c_str(), cfg.out_dir.c_str());
    return step;
  } catch (const std::exception& e) {
    if (world <= 1) throw;
    const std::string who = "rank " + std::to_string(rank) + " of " + std::to_string(world) + ": ",
                      what = describe(e);  // a communicator's errors name the rank already
    std::fprintf(stderr, "%s%s; ending every rank\n", what.rfind(who, 0) == 0 ? "" : who.c_str(), what.c_str());
    std::fflush(stderr);
    comm->abort(1);
    throw;  // not reached: abort ends the process
  }
}

}  // namespace llmtrain::train
