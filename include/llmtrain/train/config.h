// A training run's configuration: one JSON file with sections model, data, tokenizer, train, peft,
// eval, checkpoint and sample, plus out_dir and device, and "--set section.key=value" overrides on top. Unknown keys
// and values of the wrong type are errors that name the key and where it came from. The keys that choose among words
// (precision, schedule, rounding, data format, shuffle unit, device) are held as enums (Choice), read once here.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llmtrain/core/choice.h"
#include "llmtrain/data/chat.h"
#include "llmtrain/data/shuffle_unit.h"
#include "llmtrain/eval/tasks.h"
#include "llmtrain/nn/model_spec.h"
#include "llmtrain/nn/recompute.h"
#include "llmtrain/optim/options.h"
#include "llmtrain/peft/lora_config.h"
#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::train {

/// What data.train holds: token shards, SFT JSONL, or either by its name (sft for *.jsonl).
enum class DataFormat { kAuto, kShards, kSft };

inline const ChoiceNames<DataFormat>& choice_names(DataFormat) {
  static const ChoiceNames<DataFormat> names{
      {DataFormat::kAuto, "auto"}, {DataFormat::kShards, "shards"}, {DataFormat::kSft, "sft"}};
  return names;
}

/// Where a run trains: a GPU when there is one (auto), or the one named.
enum class DeviceChoice { kAuto, kCpu, kCuda };

inline const ChoiceNames<DeviceChoice>& choice_names(DeviceChoice) {
  static const ChoiceNames<DeviceChoice> names{
      {DeviceChoice::kAuto, "auto"}, {DeviceChoice::kCpu, "cpu"}, {DeviceChoice::kCuda, "cuda"}};
  return names;
}

struct ModelConfig {
  // The family and shape: a preset of either family (nn::ModelSpec::preset), or `config`, a Hugging
  // Face config.json's content as JSON text ("": none), in its place. The fields below override either
  // when set (> 0).
  std::string preset = "tiny";
  std::string config;
  int64_t n_layer = 0, n_head = 0, n_embd = 0, block_size = 0, vocab_size = 0;
  int64_t n_kv_head = 0, intermediate_size = 0;  // the Llama family only
  double dropout = 0.0;
  std::string init_from;  // weights that start the run (fine-tuning): a checkpoint, run out_dir, Hugging Face folder or
                          // llm.c .bin
  /// The model these keys describe. Throws llmtrain::Error for a bad value.
  nn::ModelSpec spec() const;
};

struct DataConfig {
  std::string train;  // shard glob, or an SFT JSONL file
  std::string val;    // the same kind as train; empty: evaluate on train
  Choice<DataFormat> format = DataFormat::kAuto;
  bool pack = false;  // sft: several examples per window (each attends only to itself; laid anew each epoch)
  Choice<data::ChatFormat> chat_template = data::ChatFormat::kAuto;  // sft: how messages lines are laid out
  bool shuffle = true;  // train batches in a seeded order each epoch; false: file order
  Choice<data::ShuffleUnit> shuffle_unit = data::ShuffleUnit::kWindow;  // shards: windows or llm.c's whole batches
};

/// The tokenizer of the data: needed for SFT JSONL and for samples during training.
struct TokenizerConfig {
  std::string kind;    // "" (none) | gpt2 | sentencepiece | hf
  std::string path;    // GPT-2 BPE folder (empty: $LLMTRAIN_GPT2_DIR or $LLMTRAIN_DATA_DIR/gpt2), .model file, or a
                       // folder with tokenizer.json (hf)
  std::string sha256;  // of the files one after another; when set, other files are refused (load_tokenizer)
};

struct TrainConfig {
  int64_t batch_size = 8;          // per rank
  int64_t seq_len = 128;           // at most the model's block_size
  int64_t total_batch_tokens = 0;  // tokens per optimizer step over all ranks; 0: batch_size * seq_len * ranks
  int64_t max_steps = 100;
  double lr = 6e-4;
  double min_lr_frac = 0.1;
  int64_t warmup_steps = 0;
  Choice<optim::ScheduleKind> schedule = optim::ScheduleKind::kCosine;
  double weight_decay = 0.1, beta1 = 0.9, beta2 = 0.95, grad_clip = 1.0;
  Choice<optim::Precision> precision = optim::Precision::kFP32;
  Choice<optim::Rounding> rounding = optim::Rounding::kStochastic;  // bf16-master's bf16 copies
  Choice<optim::StateFormat> optimizer_state = optim::StateFormat::kFP32;
  int64_t optimizer_8bit_min_size = 4096;
  bool optimizer_paged = false;
  double loss_scale = 65536;                  // fp16: the first loss scale
  int64_t loss_scale_growth_interval = 2000;  // fp16: steps without overflow before the scale doubles
  uint64_t seed = 1337;
  Choice<nn::Recompute> recompute = nn::Recompute::kNone;  // activations recomputed in backward (nn/recompute.h)
  bool fp8 = false;                                        // linear layers' products in fp8 (ops/fp8.h; bf16-master)
  int64_t fp8_history = 16;                                // fp8: steps of amaxes each scale comes from
  int64_t fp8_margin = 0;                                  // fp8: scales 2^margin below the largest that fits
  std::vector<std::string> fp8_skip = {"lm_head"};         // fp8: layers kept in bf16, by name or dotted suffix
  bool cuda_graph = true;  // CUDA, not fp16, one rank: each micro-step's forward and backward replayed as a graph
  int64_t bucket_mb = 25;  // several ranks: the gradients (MiB) one all-reduce carries
  bool zero = false;       // ZeRO-1: optimizer state sharded over the ranks (needs a communicator)
  bool quiet = false;      // no progress line, samples or messages (metrics.jsonl is still written)
};

/// How a run fine-tunes: all parameters (none), or LoRA adapters on a frozen base (lora), held in
/// 4-bit NF4 (qlora).
enum class PeftMethod { kNone, kLora, kQLora };

inline const ChoiceNames<PeftMethod>& choice_names(PeftMethod) {
  static const ChoiceNames<PeftMethod> names{
      {PeftMethod::kNone, "none"}, {PeftMethod::kLora, "lora"}, {PeftMethod::kQLora, "qlora"}};
  return names;
}

/// The adapters of a parameter-efficient run, in PEFT's terms (peft/lora_config.h).
struct PeftConfig {
  Choice<PeftMethod> method = PeftMethod::kNone;
  Choice<peft::BaseFormat> quantization = peft::BaseFormat::kNF4;  // qlora's base
  int64_t r = 8;
  double alpha = 16;
  double dropout = 0.0;
  std::vector<std::string> target_modules;  // empty: PEFT's default for the family; ["all-linear"]: every
                                            // linear layer but the head
  std::string target_regex;                 // in place of target_modules: the layers whose full name matches
  bool use_rslora = false;
  std::vector<std::string> modules_to_save;
  Choice<peft::LoraInit> init = peft::LoraInit::kDefault;
  std::string rank_pattern, alpha_pattern;  // JSON objects' text (a name's pattern -> its r or alpha); "": none
  /// The adapter these keys describe on a model of `spec`. Throws llmtrain::Error naming the key.
  peft::LoraConfig lora(const nn::ModelSpec& spec) const;
};

struct EvalConfig {
  int64_t every = 0;  // steps; 0: only at the end
  int64_t batches = 20;
  std::string tasks;  // a JSON list of task objects' text (eval/tasks.h); "": none
  /// The tasks, each checked. Throws llmtrain::Error naming the entry and key at fault.
  std::vector<eval::TaskConfig> task_configs() const;
};

struct CheckpointConfig {
  int64_t every = 0;  // steps; 0: off
  int64_t keep = 2;   // newest checkpoints kept
};

struct SampleConfig {
  int64_t every = 0;    // steps; 0: off
  int64_t tokens = 64;  // most new tokens (a sample ends early at end-of-text)
  std::string prompt;   // empty: start a fresh document (end-of-text)
  double temperature = 0.8;
  int64_t top_k = 40;  // 0: all tokens
};

/// The whole configuration.
///   auto cfg = TrainerConfig::load("examples/configs/sotu_124m.json", {"train.max_steps=20"});
struct TrainerConfig {
  ModelConfig model;
  DataConfig data;
  TokenizerConfig tokenizer;
  TrainConfig train;
  PeftConfig peft;
  EvalConfig eval;
  CheckpointConfig checkpoint;
  SampleConfig sample;
  std::string out_dir = "runs/default";
  Choice<DeviceChoice> device = DeviceChoice::kAuto;

  /// Parses JSON text; `source` names it in errors. Applies "a.b=value" overrides (values are JSON,
  /// or plain strings) before checking. Throws llmtrain::Error naming the key for unknown keys, a key
  /// given twice, wrong types and out-of-range values, and where the value came from (`source`, or
  /// "--set a.b=value").
  static TrainerConfig parse(const std::string& json_text, const std::string& source,
                             const std::vector<std::string>& overrides = {});
  /// Reads and parses a file. A relative tokenizer.path with a sha256 (the tokenizer a run folder
  /// carries) is taken relative to the file's folder; other paths relative to the working folder.
  static TrainerConfig load(const std::string& path, const std::vector<std::string>& overrides = {});
  /// The configuration as JSON (every key, defaults included).
  std::string to_json() const;
  /// Every key as a Markdown table: key, type, default, meaning (docs/CONFIG.md).
  static std::string reference();
  /// Every key ("train.lr", "out_dir", ...), in the order of reference().
  static std::vector<std::string> keys();

  /// The optimizer options these settings describe.
  optim::OptimizerOptions optimizer() const;
  /// True when data.train names SFT JSONL (format sft, or auto and a .jsonl name).
  bool sft() const;
};

/// The SHA-256 of the tokenizer's files one after another (tokenizer::tokenizer_files' order).
std::string tokenizer_sha256(const TokenizerConfig& t);

/// The tokenizer `t` names, its files first checked against t.sha256 when that is set. Throws
/// llmtrain::Error naming a missing file, or the files and both hashes when they differ.
///   auto tok = llmtrain::train::load_tokenizer(cfg.tokenizer);
std::unique_ptr<tokenizer::Tokenizer> load_tokenizer(const TokenizerConfig& t);

/// Copies the files of tokenizer `t` into `dir`/tokenizer/ (each written beside and renamed; a
/// SentencePiece model as tokenizer.model) and returns the section that names the copy: its kind,
/// its path relative to `dir` ("tokenizer" or "tokenizer/tokenizer.model") and its sha256.
TokenizerConfig copy_tokenizer(const TokenizerConfig& t, const std::string& dir);

/// Where copy_tokenizer puts a tokenizer of `kind`, relative to the folder: "tokenizer" (GPT-2 BPE) or
/// "tokenizer/tokenizer.model" (SentencePiece).
std::string copied_tokenizer_path(const std::string& kind);

/// `t` with a relative path taken relative to `dir` when `t` has a sha256 (a copy llmtrain made).
TokenizerConfig tokenizer_in(TokenizerConfig t, const std::string& dir);

/// The folder of a tokenizer's settings (tokenizer_config.json and its chat template): `t.path`, or the
/// folder of a SentencePiece .model file.
std::string tokenizer_dir(const TokenizerConfig& t);

/// The id a model's input starts with: the tokenizer's bos for the Llama family (as transformers adds
/// it: Llama 2 and 3, Mistral; Qwen2's tokenizer has none), none for GPT-2, whose documents start
/// after an end-of-text.
std::optional<int32_t> input_bos(const nn::ModelSpec& spec, const tokenizer::Tokenizer& tok);

}  // namespace llmtrain::train
