// The Trainer: the run's parts put together (the model, optimizer, data, step, metrics and checkpoints)
// and its loop. What each part does lives in its own file: train_step.cpp, metrics.cpp, checkpointer.cpp,
// model_files.cpp, driver.cpp.
#include "llmtrain/train/trainer.h"

#include <ATen/Context.h>

#include "llmtrain/config.h"  // LLMTRAIN_WITH_CUDA
#if LLMTRAIN_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif
#include <torch/cuda.h>
#include <torch/serialize.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <optional>
#include <sstream>

#include "../core/failpoint.h"
#include "../core/json.h"
#include "checkpoint_state.h"
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
#include "llmtrain/nn/adapter.h"
#include "llmtrain/optim/optimizer.h"
#include "llmtrain/peft/lora.h"
#include "llmtrain/tokenizer/tokenizer.h"
#include "llmtrain/train/checkpointer.h"
#include "run_folder.h"
#include "torch_files.h"
#include "train_step.h"

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

torch::Device resolve_device(DeviceChoice choice) {
  if (choice == DeviceChoice::kCpu) return torch::kCPU;
  const bool cuda = torch::cuda::is_available();
  LLMTRAIN_CHECK(cuda || choice == DeviceChoice::kAuto, "device \"cuda\" asked for, but no CUDA device is visible");
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
  if (device.is_cuda())
    return double(at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->totalGlobalMem);
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

// fp8 products need fp8 tensor cores (compute capability 8.9, Ada, or newer); the CPU runs the reference.
void check_fp8_device(const torch::Device& device) {
#if LLMTRAIN_WITH_CUDA
  if (!device.is_cuda()) return;
  const cudaDeviceProp* p = at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index());
  LLMTRAIN_CHECK(p->major * 10 + p->minor >= 89, "train.fp8: device ", device.str(), " (", p->name,
                 ", compute capability ", p->major, ".", p->minor, ") has no fp8 tensor cores (8.9 or newer)");
#else
  (void)device;
#endif
}

// A lower bound of the memory a run takes: the parameters, their gradients, AdamW's two moments and the
// bf16-master copies (those two over the ranks with ZeRO-1), and one micro-batch's logits; with LoRA
// the frozen base alone (the adapters are a small part), in NF4 or int8 with QLoRA; 8-bit or paged moments take
// less or none. A config past the device's memory is
// refused at once, with both figures, rather than failing in an allocation.
void check_memory(const TrainerConfig& c, const nn::ModelSpec& spec, torch::Device device, int world) {
  const double params = double(spec.stored_parameters());
  const bool master = c.train.precision == optim::Precision::kBF16Master,
             low = c.train.precision != optim::Precision::kFP32, full = c.peft.method == PeftMethod::kNone,
             quantized = c.peft.method == PeftMethod::kQLora;
  // the parameters and their gradients; NF4 about half a byte a weight, int8 one
  const double weights = quantized ? params * (c.peft.quantization == peft::BaseFormat::kInt8 ? 1.0 : 0.52)
                                   : params * (master ? 2 : 4) * (full ? 2 : 1);
  // the moments (8 bytes a parameter, 2 in 8 bits, none on the device when paged) and the masters
  const double moments = c.train.optimizer_paged ? 0.0 : c.train.optimizer_state == optim::StateFormat::k8Bit ? 2 : 8;
  const double optimizer = full ? params * (moments + (master ? 4 : 0)) / (c.train.zero ? world : 1) : 0.0;
  const double logits =
      double(c.train.batch_size) * double(c.train.seq_len) * double(spec.logits_width()) * (low ? 2 : 4);
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

// A ZeRO-1 rank's part of the optimizer state: optimizer.rank00001.pt.
std::string shard_file(const char* what, int rank) {
  char buf[32];
  std::snprintf(buf, sizeof buf, ".rank%05d.pt", rank);
  return what + std::string(buf);
}

// Every rank must train the same model with the same settings: the configurations are compared by an
// FNV-1a hash, and every rank fails alike. Where files lie (the output, data, tokenizer and initial
// weights) may differ from node to node and is left out.
void check_same_config(const TrainerConfig& c, dist::Communicator& comm) {
  TrainerConfig same = c;
  for (std::string* path :
       {&same.out_dir, &same.data.train, &same.data.val, &same.tokenizer.path, &same.model.init_from})
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
  const bool constant = now.train.schedule == optim::ScheduleKind::kConstant;
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
                        key == "train.seed" || (key == "train.max_steps" && !constant) || key.rfind("peft.", 0) == 0 ||
                        key == "train.optimizer_state" || key == "train.optimizer_8bit_min_size" ||
                        key == "train.fp8" || key == "train.fp8_history" || key == "train.fp8_skip";
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
  nn::ModelSpec spec = nn::GPT2Config();  // cfg.model's
  std::shared_ptr<nn::CausalLM> model;
  std::optional<peft::LoraConfig> lora;  // peft.method lora: the adapters trained, alone in the checkpoints
  std::unique_ptr<optim::MixedPrecisionOptimizer> opt;
  std::unique_ptr<dist::DataParallel> dp;  // several ranks
  std::unique_ptr<tokenizer::Tokenizer> tok;
  std::vector<eval::Task> tasks;  // eval.tasks, their data read once
  TokenizerConfig run_tok;        // rank 0: the copy in out_dir/tokenizer, as the run's configs name it (relative)
  std::unique_ptr<data::SFTDataset> sft_train, sft_val;  // read by the loaders below (SFT runs)
  std::unique_ptr<data::BatchSource> train, val;
  int64_t accum = 1;
  int64_t step = 0;
  std::unique_ptr<detail::TrainStep> stepper;
  std::unique_ptr<Checkpointer> ckpt;
  std::unique_ptr<MetricsLogger> log;
  std::function<void(const StepRecord&)> callback;
  bool stop_requested = false;
  struct sigaction old_int {
  }, old_term{};

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
      std::printf(
          "checkpoint %s holds the random generators of %zu rank(s), this run has %d: the ranks past the first "
          "draw from fresh seeds (the run goes on, not bit for bit as an unbroken one)\n",
          dir.c_str(), ranks, world);
  }

  // Ranks past the first draw their dropout masks from generators of their own (rank 0 keeps the
  // seed's, so one rank trains as a single process does).
  void seed_rank_generators() const { torch::manual_seed(cfg.train.seed ^ (0x9E3779B97F4A7C15ull * uint64_t(rank))); }

  void set_rng_states(const std::vector<torch::Tensor>& rng) const {
    const auto restore = [](at::Generator gen, const torch::Tensor& s) {  // a handle: shares the default one
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(s);
    };
    restore(at::globalContext().defaultGenerator(at::kCPU), rng.at(0));
    if (device.is_cuda() && rng.size() > 1) restore(at::globalContext().defaultGenerator(device), rng[1]);
  }

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
  // Batches of `path`: shards (a glob) or SFT JSONL, whose tokenized examples `keep` then owns.
  std::unique_ptr<data::BatchSource> make_source(const std::string& path, bool shuffle,
                                                 std::unique_ptr<data::SFTDataset>& keep) const {
    if (cfg.sft()) {
      data::SFTOptions so;
      so.path = path;
      so.seq_len = cfg.train.seq_len;
      so.pack = cfg.data.pack;
      so.chat_format = cfg.data.chat_template;
      so.chat_dir = tokenizer_dir(cfg.tokenizer);
      so.add_bos = input_bos(spec, *tok).has_value();
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
    o.shuffle_unit = cfg.data.shuffle_unit;
    o.vocab_size = spec.vocab_size();
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

  // Every rank stops after the same step.
  bool stop_now() const {
    double stop = (g_stop || stop_requested) ? 1.0 : 0.0;
    if (world > 1) stop = mean_over_ranks(torch::tensor(stop, torch::kDouble));
    return stop > 0;
  }

  // Before the first step: every rank starts from rank 0's weights, config.json is written, and the step
  // is graphed where it can be.
  void start_run() {
    if (dp) {
      if (world > 1) check_same_config(cfg, *comm);
      torch::NoGradGuard no_grad;
      dp->broadcast_parameters(0);
      // Sharded masters are each rank's own slices (made from the same seeded weights on every rank).
      if (opt->options().precision == optim::Precision::kBF16Master && !opt->sharded())
        for (torch::Tensor m : opt->master_params()) comm->broadcast(m, 0);  // a handle: same storage
    }
    // Written here, not at construction: a resume that is refused leaves the run's config as it was.
    if (rank == 0) fs::write_file_atomic(cfg.out_dir + "/config.json", stored_config());
    model->module().train();
    // Not on several ranks: DataParallel's reductions start from backward's hooks, on the host. Not for
    // packed SFT: its position ids would be one more input, and its embedding checks ids on the host.
    // Not fp16: its loss scale changes from step to step.
    // Not with recompute: its backward runs a forward and a nested backward, not tried under capture.
    if (!dp && device.is_cuda() && cfg.train.cuda_graph && !(cfg.sft() && cfg.data.pack) &&
        opt->options().precision != optim::Precision::kFP16 && cfg.train.recompute == nn::Recompute::kNone)
      stepper->use_graph();
    log->start();
  }

  void load_initial_weights(const std::string& from) {
    const nn::ModelSpec theirs = model_spec_at(from);  // before their weights are read
    LLMTRAIN_CHECK(theirs.same_shape(spec), "model.init_from ", from, " holds a model of ", theirs.describe(),
                   "; this config has ", spec.describe());
    const auto src = load_model(from);
    torch::NoGradGuard no_grad;
    const auto from_params = src->module().named_parameters();
    for (auto& p : model->module().named_parameters()) p.value().copy_(from_params[p.key()]);
  }

  // A sample from the model, printed and logged; its own seeded generator leaves the run's RNG alone.
  void write_sample() {
    std::vector<int32_t> prompt = cfg.sample.prompt.empty() ? std::vector<int32_t>{} : tok->encode(cfg.sample.prompt);
    if (const auto bos = input_bos(spec, *tok)) prompt.insert(prompt.begin(), *bos);
    if (prompt.empty()) {
      LLMTRAIN_CHECK(tok->eot_id().has_value(),
                     "sample.prompt is empty and the tokenizer has no end-of-text id to start from");
      prompt = {*tok->eot_id()};
    }
    infer::SamplingOptions o;
    o.temperature = cfg.sample.temperature;
    o.top_k = cfg.sample.top_k;
    o.seed = cfg.train.seed + uint64_t(step);
    if (tok->eot_id()) o.stop_tokens = {*tok->eot_id()};
    o.vocab_limit = tok->vocab_size();  // no padding id, which no text stands for
    // The KV cache holds block_size positions: a longer sample is cut there.
    const int64_t room = spec.block_size() + 1 - int64_t(prompt.size());
    LLMTRAIN_CHECK(room >= 1, "sample.prompt is ", prompt.size(), " tokens, longer than the model's block_size ",
                   spec.block_size());
    auto ids = infer::generate(model, prompt, std::min<int64_t>(cfg.sample.tokens, room), o);
    // Decoded as one piece (token by token would lose SentencePiece's spaces), without the end-of-text
    // ids that start and end a fresh document.
    if (cfg.sample.prompt.empty()) ids.erase(ids.begin());
    if (!ids.empty() && tok->eot_id() && ids.back() == *tok->eot_id()) ids.pop_back();
    const std::string text = tokenizer::printable_utf8(tok->decode(ids));
    log->sample(step, text);
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
  d.spec = c.model.spec();
  d.device = resolve_device(c.device);
  if (d.comm && d.device.is_cuda()) {  // a GPU a rank; the ranks' gradients travel over NCCL
    d.device = torch::Device(torch::kCUDA, int8_t(dist::local_rank() % int(torch::cuda::device_count())));
    if (!std::dynamic_pointer_cast<dist::NcclCommunicator>(d.comm))
      d.comm = dist::NcclCommunicator::create(d.comm, d.device);  // makes it the current device
  }
  LLMTRAIN_CHECK(!c.data.train.empty(), "data.train is empty: give a glob of training shards or an SFT JSONL file");
  if (d.rank == 0) detail::check_run_folder(c, /*force=*/false);  // before anything is loaded or written
  const int64_t micro =
      product_checked({c.train.batch_size, c.train.seq_len, d.world},  // tokens a micro-step, all ranks
                      "train.batch_size x train.seq_len x ranks");
  const int64_t total = c.train.total_batch_tokens > 0 ? c.train.total_batch_tokens : micro;
  LLMTRAIN_CHECK(total % micro == 0, "train.total_batch_tokens ", total,
                 " is not a multiple of batch_size x seq_len x ranks = ", micro);
  d.accum = total / micro;
  if (!c.tokenizer.kind.empty()) {
    d.tok = load_tokenizer(c.tokenizer);
    if (d.rank == 0) d.run_tok = d.own_tokenizer();
    LLMTRAIN_CHECK(d.tok->vocab_size() <= d.spec.vocab_size(), "tokenizer ", c.tokenizer.kind, " ", c.tokenizer.path,
                   " has ", d.tok->vocab_size(), " ids, more than the model's vocab_size ", d.spec.vocab_size());
    // The tasks' files are read now: a bad one fails the run before its first step.
    for (const auto& t : c.eval.task_configs())
      d.tasks.emplace_back(t, *d.tok, input_bos(d.spec, *d.tok), d.spec.block_size());
    // Found now, not after the steps before the first sample.
    if (c.sample.every > 0 && !c.sample.prompt.empty()) {
      const int64_t n = int64_t(d.tok->encode(c.sample.prompt).size()) + (input_bos(d.spec, *d.tok) ? 1 : 0);
      LLMTRAIN_CHECK(n < d.spec.block_size(), "sample.prompt is ", n,
                     " tokens, which leaves no room for a new one in the model's block_size ", d.spec.block_size());
    }
  }

  check_memory(c, d.spec, d.device, d.world);
  const double peak = peak_flops(d.device);  // before anything is allocated: it checks LLMTRAIN_PEAK_TFLOPS
  torch::manual_seed(c.train.seed);
  d.model = nn::make_model(d.spec);
  d.model->set_recompute(c.train.recompute);
  if (!c.model.init_from.empty()) d.load_initial_weights(c.model.init_from);
  if (c.peft.method != PeftMethod::kNone) {  // drawn after the base, from the seeded generator
    d.lora = c.peft.lora(d.spec);
    d.lora->base_model = c.model.init_from;
    peft::add_lora(*d.model, *d.lora);
  }
  d.model->module().to(d.device);
  if (c.peft.method == PeftMethod::kQLora) peft::quantize_base(*d.model, c.peft.quantization);  // on the device
  d.opt = std::make_unique<optim::MixedPrecisionOptimizer>(d.model->module(), c.optimizer());
  if (c.train.fp8) {  // after the optimizer's cast to bf16: the scaling stays float32
    check_fp8_device(d.device);
    nn::enable_fp8(d.model->module(), c.train.fp8_history, c.train.fp8_skip);
  }
  LLMTRAIN_CHECK(!c.train.zero || d.comm, "train.zero shards the optimizer over data-parallel ranks, and this run ",
                 "has no communicator: start it under mpirun (train makes one there) or set train.zero=false");
  if (d.comm) {  // one rank too: the same path as many
    dist::DataParallelOptions o;
    o.bucket_bytes = c.train.bucket_mb << 20;
    o.shard_optimizer = c.train.zero;
    d.dp = std::make_unique<dist::DataParallel>(d.model->module().parameters(), d.comm, o);
    if (c.train.zero) shard_optimizer(*d.opt, *d.dp, d.comm);
  }
  d.stepper = std::make_unique<detail::TrainStep>(*d.model, *d.opt, d.dp.get(), d.device, d.accum);
  d.ckpt = std::make_unique<Checkpointer>(c.out_dir, c.checkpoint.keep, d.comm);
  MetricsLogger::Options lo;
  lo.out_dir = c.out_dir;
  lo.write = d.rank == 0;
  lo.print = d.rank == 0 && !c.train.quiet;
  lo.max_steps = c.train.max_steps;
  lo.step_tokens = total;
  lo.flops_per_token = d.model->flops_per_token(c.train.seq_len);
  lo.peak_flops = peak * d.world;
  lo.loss_scale = d.opt->options().precision == optim::Precision::kFP16;
  lo.eval_every = c.eval.every;
  lo.sample_every = c.sample.every;
  lo.checkpoint_every = c.checkpoint.every;
  d.log = std::make_unique<MetricsLogger>(lo);
  d.train = d.make_source(c.data.train, c.data.shuffle, d.sft_train);
  // The chat format found in the tokenizer's folder is kept by name: the run's copy of the folder may lack it.
  if (d.sft_train) d.cfg.data.chat_template = d.sft_train->chat_format();
  // Evaluation always reads the same batches: the val data (else the train data) in file order.
  d.val = d.make_source(c.data.val.empty() ? c.data.train : c.data.val, false, d.sft_val);

  if (d.rank == 0) {
    fs::make_dirs(c.out_dir);
    if (!fs::is_our_output(c.out_dir)) fs::mark_output(c.out_dir, "run");
    if (!c.tokenizer.kind.empty() && d.run_tok.sha256.empty()) d.run_tok = copy_tokenizer(c.tokenizer, c.out_dir);
  }
  if (d.rank > 0) d.seed_rank_generators();
  g_stop = false;
  struct sigaction sa {};
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
nn::CausalLM& Trainer::model() { return *impl_->model; }
std::shared_ptr<nn::CausalLM> Trainer::shared_model() { return impl_->model; }
optim::MixedPrecisionOptimizer& Trainer::optimizer() { return *impl_->opt; }
const TrainerConfig& Trainer::config() const { return impl_->cfg; }
int64_t Trainer::grad_accum_steps() const { return impl_->accum; }
void Trainer::on_step(std::function<void(const StepRecord&)> callback) { impl_->callback = std::move(callback); }
void Trainer::request_stop() { impl_->stop_requested = true; }

double Trainer::evaluate() {
  Impl& d = *impl_;
  nn::CausalLM& lm = *d.model;
  lm.module().eval();
  torch::NoGradGuard no_grad;
  d.val->load_state({0, 0, 0});
  torch::Tensor sum = torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(d.device));
  for (int64_t i = 0; i < d.cfg.eval.batches; ++i) {
    const auto b = d.val->next();
    optim::AutocastScope amp(d.device.type(), d.opt->options().precision);
    sum += lm.loss(b.inputs, b.targets, b.positions).to(torch::kDouble);
  }
  lm.module().train();
  const double mean = d.mean_over_ranks(sum) / double(d.cfg.eval.batches);
  lm.check_inputs(true);  // the device has finished: free
  return mean;
}

std::vector<eval::TaskResult> Trainer::evaluate_tasks() {
  Impl& d = *impl_;
  torch::NoGradGuard no_grad;
  std::vector<eval::TaskResult> out;
  for (const auto& task : d.tasks) {
    const auto t0 = std::chrono::steady_clock::now();
    eval::Task::Tally tally;
    {
      optim::AutocastScope amp(d.device.type(), d.opt->options().precision);
      tally = task.run(*d.model, d.rank, d.world);
    }
    if (d.world > 1) {  // each rank scored its share: the sums over ranks
      torch::Tensor sums = torch::tensor(tally, torch::kDouble).to(d.device);
      d.comm->all_reduce_sum(sums);
      sums = sums.cpu();
      tally.assign(sums.data_ptr<double>(), sums.data_ptr<double>() + sums.numel());
    }
    out.push_back(task.result(tally, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()));
  }
  return out;
}

int64_t Trainer::run() {
  Impl& d = *impl_;
  const auto& c = d.cfg;
  d.start_run();
  // A step's record waits for its loss and grad norm, which travel to the host behind its work: on one
  // rank it is written once the next step's forward and backward are queued, so that the device never
  // waits for the host between steps. Steps that evaluate, sample, checkpoint or end the run, and
  // every step on several ranks (whose stop check synchronises anyway), are recorded at once. On the
  // CPU a step's work is done when it is queued; on a GPU when its loss reaches the host.
  struct Queued {
    int64_t step;
    HostCopy loss;                                              // the summed micro-step losses, averaged over ranks
    std::optional<std::chrono::steady_clock::time_point> done;  // the CPU's: when its work ended
  };
  std::optional<Queued> queued;
  const auto record = [&](bool wait_for_checks) {  // the queued step's record: metrics, progress, callback
    const auto info = d.opt->finish_step();
    StepRecord r;
    r.step = queued->step;
    r.loss = queued->loss.get().item<double>() / double(d.accum);
    const auto done = queued->done;
    queued.reset();
    d.model->check_inputs(wait_for_checks);  // bad token ids the recorded step's kernels saw
    r.lr = info.lr;
    r.grad_norm = info.grad_norm;
    r.skipped = info.skipped;
    r.loss_scale = info.loss_scale;
    d.log->step(r, done);
    if (d.callback) d.callback(r);
    // Test hook: "train:throw:rankR" makes rank R fail at step 3, as bad data or a full disk on one rank would.
    if (r.step == 3 && llmtrain::detail::failpoint_set(("train:throw:rank" + std::to_string(d.rank)).c_str()))
      throw Error("failpoint train:throw:rank" + std::to_string(d.rank) + " at step 3");
  };
  const auto due = [](int64_t every, int64_t step) { return every > 0 && step % every == 0; };
  int64_t last_eval = -1;
  while (d.step < c.train.max_steps && !d.stop_now()) {
    // Where this step starts from, should a stop asked for in the queued step's record drop it.
    struct Start {
      data::DataLoaderState loader;
      std::vector<torch::Tensor> rng;
    };
    const std::optional<Start> before =
        queued ? std::optional<Start>(Start{d.train->state(), d.rng_states()}) : std::nullopt;
    const torch::Tensor loss_sum = d.stepper->forward_backward(*d.train);
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
    if (c.train.fp8) {  // the next step's scales, the same on every rank
      std::function<void(torch::Tensor&)> over_ranks;
      if (d.world > 1) over_ranks = [&](torch::Tensor& amaxes) { d.comm->all_reduce_max(amaxes); };
      nn::update_fp8_scales(d.model->module(), c.train.fp8_margin, over_ranks);
    }
    queued = Queued{++d.step, HostCopy(d.mean_over_ranks_tensor(loss_sum)), std::nullopt};
    if (!d.device.is_cuda()) queued->done = std::chrono::steady_clock::now();
    const bool eval_now = due(c.eval.every, d.step), sample_now = due(c.sample.every, d.step),
               checkpoint_now = due(c.checkpoint.every, d.step);
    if (d.world > 1 || eval_now || sample_now || checkpoint_now || d.step == c.train.max_steps)
      record(/*wait_for_checks=*/true);
    if (eval_now)
      d.log->pause(MetricsLogger::Pause::kEval, [&] {
        d.log->eval(d.step, evaluate());
        for (const auto& r : evaluate_tasks()) d.log->eval_task(d.step, r);
        last_eval = d.step;
      });
    if (sample_now) d.log->pause(MetricsLogger::Pause::kSample, [&] { d.write_sample(); });
    if (checkpoint_now) d.log->pause(MetricsLogger::Pause::kCheckpoint, [&] { save_checkpoint(); });
  }
  if (queued) record(/*wait_for_checks=*/true);  // the loop stopped before the next step began
  d.log->end_line();
  if (d.step < c.train.max_steps) {  // interrupted
    d.log->say("stopping at step " + std::to_string(d.step) + ": writing a checkpoint");
    if (d.ckpt->saved_step() != d.step) save_checkpoint();
  } else {
    if (last_eval != d.step) {
      d.log->eval(d.step, evaluate());
      for (const auto& r : evaluate_tasks()) d.log->eval_task(d.step, r);
    }
    if (c.checkpoint.every > 0 && d.ckpt->saved_step() != d.step) save_checkpoint();
  }
  d.log->write_loss_curves();
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
  const std::vector<torch::Tensor> rng = d.all_rng_states();  // every rank takes part
  const bool sharded = d.opt->sharded();
  const bool masters = d.opt->options().precision == optim::Precision::kBF16Master;
  Checkpointer::Parts parts;
  if (sharded)  // ZeRO-1: every rank writes its own slices' optimizer state
    parts.per_rank = [&](const std::string& dir) {
      detail::save_torch(d.opt->adamw(), dir + "/" + shard_file("optimizer", d.rank));
      if (masters) detail::save_torch(d.opt->master_params(), dir + "/" + shard_file("master", d.rank));
    };
  parts.shared = [&](const std::string& dir) {
    // LoRA: the adapters as PEFT's folder (the base is model.init_from's), exactly as trained.
    if (d.lora) peft::write_lora_files(*d.model, *d.lora, dir);
    else detail::save_torch(d.model->module().shared_from_this(), dir + "/model.pt");
    if (!sharded) {
      detail::save_torch(d.opt->adamw(), dir + "/optimizer.pt");
      if (masters) detail::save_torch(d.opt->master_params(), dir + "/master.pt");
    }
    detail::save_torch(rng, dir + "/rng.pt");
    if (!d.cfg.tokenizer.kind.empty()) copy_tokenizer(tokenizer_in(d.run_tok, d.cfg.out_dir), dir);
  };
  parts.state_json = [&] {
    const auto loader = d.train->state();
    detail::CheckpointState state;
    state.step = d.step;
    state.elapsed_s = d.log->elapsed();
    state.model = d.spec;
    state.precision = d.cfg.train.precision;
    state.zero_ranks = sharded ? d.world : 0;
    state.loss_scale = d.opt->scaler().scale_value();
    state.good_steps = d.opt->scaler().good_steps();
    state.epoch = loader.epoch;
    state.shard = loader.shard;
    state.position = loader.position;
    state.config = d.stored_config();
    return state.to_json();
  };
  d.ckpt->save(d.step, parts);
}

bool Trainer::resume_if_possible() {
  Impl& d = *impl_;
  d.stepper->drop_graph();  // loading may give the parameters new storage, which a captured graph would not see
  if (d.rank == 0) d.ckpt->remove_stale();
  const auto newest = d.ckpt->newest();
  if (!newest) {
    d.log->keep_through(0);  // a run that stopped before its first checkpoint starts over
    return false;
  }
  const std::string dir = *newest;
  const auto state = detail::CheckpointState::read(dir);
  LLMTRAIN_CHECK(!state.model_only, "checkpoint ", dir, " holds a model alone (converted), not a ",
                 "run to resume: start a run from it with model.init_from or finetune --from");
  LLMTRAIN_CHECK(state.model.same_shape(d.spec), "checkpoint ", dir, " holds a model of ", state.model.describe(),
                 "; this config has ", d.spec.describe());
  LLMTRAIN_CHECK(state.precision.value() == d.cfg.train.precision, "checkpoint ", dir, " was trained in ",
                 state.precision, "; this config asks for ", d.cfg.train.precision);
  const bool sharded = d.opt->sharded();
  const int64_t zero_ranks = state.zero_ranks, want_ranks = sharded ? d.world : 0;
  LLMTRAIN_CHECK(
      zero_ranks == want_ranks, "checkpoint ", dir, " holds ",
      zero_ranks > 0 ? "optimizer state sharded over " + std::to_string(zero_ranks) + " ranks (ZeRO-1)"
                     : std::string("unsharded optimizer state"),
      "; this run ",
      sharded ? "shards it over " + std::to_string(d.world) + " ranks" : std::string("does not shard it"),
      ": resume with ",
      zero_ranks > 0 ? "train.zero=true on " + std::to_string(zero_ranks) + " ranks" : std::string("train.zero=false"));
  // The shape, precision and sharding are named above as such; the other keys here.
  check_resumed_config(TrainerConfig::parse(state.config, "checkpoint " + dir + "/state.json's config"), d.cfg, dir,
                       d.rank == 0 && !d.cfg.train.quiet);
  const auto load = [&](const std::string& file, auto&& body) { detail::load_part(dir, file, body); };
  if (d.lora) {
    load("adapter_model.safetensors", [&](const std::string&) { peft::read_lora_weights(*d.model, dir); });
  } else {
    load("model.pt", [&](const std::string& p) {
      auto module = d.model->module().shared_from_this();
      torch::load(module, p);
    });
  }
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
  d.log->set_elapsed_before(state.elapsed_s);
  d.opt->scaler().set_state(state.loss_scale, state.good_steps);
  try {
    d.train->load_state({state.epoch, state.shard, state.position});
  } catch (const llmtrain::Error& e) {
    LLMTRAIN_CHECK(false, "checkpoint ", dir, "/state.json: train_loader does not fit this run's data: ", e.what());
  }

  d.ckpt->set_saved_step(d.step);
  d.log->keep_through(d.step);
  if (d.rank == 0 && !d.cfg.train.quiet)
    std::printf("resumed from %s (step %lld)\n", dir.c_str(), static_cast<long long>(d.step));
  return true;
}

}  // namespace llmtrain::train
