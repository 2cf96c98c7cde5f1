// One table lists every key with its field, so parsing, type checks, overrides and to_json() cannot
// drift apart.
#include "llmtrain/train/config.h"

#include <cmath>
#include <cstdint>
#include <functional>
#include <map>
#include <regex>
#include <variant>

#include "../core/json.h"
#include "../io/hf_config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/tokenizer/tokenizer.h"

namespace llmtrain::train {
namespace {

using Json = json::Json;
// A key whose value is one of a few words, held as a Choice of some enum.
struct ChoiceField {
  std::function<bool(const std::string&)> set;  // false: the word names no value
  std::function<std::string()> get;
  std::string words;  // "a, b or c"
};

template <typename E>
ChoiceField choice(Choice<E>* c) {
  return {[c](const std::string& word) {
            E value{};
            if (!Choice<E>::find(word, &value)) return false;
            *c = value;
            return true;
          },
          [c] { return std::string(c->name()); }, Choice<E>::names()};
}

// A key whose value is a JSON object (or null: none), or with `list` a list of objects (empty: none),
// held as its text.
struct ObjectField {
  std::string* text;  // "" for null or []
  bool list = false;
};

using FieldPtr = std::variant<int64_t*, uint64_t*, double*, bool*, std::string*, std::vector<std::string>*, ChoiceField,
                              ObjectField>;

struct Field {
  std::string key;  // "train.lr", or "out_dir" at the top
  FieldPtr ptr;
  const char* doc;  // what the key means, for docs/CONFIG.md and --print-config's reference
};

std::vector<Field> fields(TrainerConfig& c) {
  return {
      {"model.preset", &c.model.preset,
       "the model's family and shape: GPT-2's tiny, gpt2, gpt2-medium, gpt2-large, gpt2-xl; the Llama "
       "family's llama-3.2-1b, llama-3.2-3b, llama-3.1-8b, llama-2-7b, mistral-7b, qwen2.5-0.5b, qwen2.5-1.5b, "
       "qwen2.5-7b, smollm2-135m, smollm2-360m, llama-tiny, mistral-tiny, qwen2-tiny. The model keys below "
       "override it when > 0"},
      {"model.config", ObjectField{&c.model.config},
       "a Hugging Face config.json's content (gpt2, llama, mistral or qwen2): the model's family and shape "
       "in place of the preset (finetune sets it from the folder it starts from); null: the preset"},
      {"model.n_layer", &c.model.n_layer, "transformer blocks (0: the preset's)"},
      {"model.n_head", &c.model.n_head, "attention heads; n_embd must be a multiple (0: the preset's)"},
      {"model.n_embd", &c.model.n_embd, "width of the residual stream, Llama's hidden_size (0: the preset's)"},
      {"model.block_size", &c.model.block_size, "longest sequence, the positions the model has (0: the preset's)"},
      {"model.vocab_size", &c.model.vocab_size, "token ids, at least the tokenizer's (0: the preset's)"},
      {"model.n_kv_head", &c.model.n_kv_head,
       "Llama family: key/value heads (grouped-query attention), a divisor of n_head (0: the preset's)"},
      {"model.intermediate_size", &c.model.intermediate_size,
       "Llama family: width of the SwiGLU MLP (0: the preset's)"},
      {"model.dropout", &c.model.dropout,
       "dropout probability: GPT-2's on embeddings, attention weights and residual branches; the Llama "
       "family's on attention weights"},
      {"model.init_from", &c.model.init_from,
       "weights the run starts from (fine-tuning): a checkpoint, a run folder, "
       "a Hugging Face folder or an llm.c .bin; empty: random initialisation"},
      {"data.train", &c.data.train, "training data: a glob of token shards (prepare_data) or an SFT .jsonl file"},
      {"data.val", &c.data.val, "validation data of the same kind; empty: evaluate on the training data"},
      {"data.format", choice(&c.data.format), "shards, sft, or auto (sft for names ending in .jsonl)"},
      {"data.pack", &c.data.pack,
       "sft: several examples per window, each attending only to itself, packed anew "
       "each epoch"},
      {"data.chat_template", choice(&c.data.chat_template),
       "sft messages lines ({\"messages\": [{\"role\", \"content\"}]}): llama3, llama3.1 (Llama 3.1-3.3's "
       "system header), chatml, qwen2, qwen2.5 and smollm2 (ChatML with their default system message), mistral, or "
       "auto "
       "(the one the tokenizer folder's tokenizer_config.json chat_template writes)"},
      {"data.shuffle", &c.data.shuffle, "train on a seeded order each epoch; false: file order"},
      {"data.shuffle_unit", choice(&c.data.shuffle_unit),
       "shards: window (each window) or batch (whole batches of the text, "
       "llm.c's order)"},
      {"tokenizer.kind", &c.tokenizer.kind,
       "gpt2, sentencepiece, hf (a Hugging Face tokenizer.json), or empty (none: no SFT and no samples)"},
      {"tokenizer.path", &c.tokenizer.path,
       "GPT-2 BPE folder (encoder.json + vocab.bpe; empty: $LLMTRAIN_GPT2_DIR), "
       "SentencePiece .model file, or a folder with tokenizer.json; relative to the config's folder when "
       "sha256 is set (as in the configs llmtrain writes)"},
      {"tokenizer.sha256", &c.tokenizer.sha256,
       "SHA-256 of the tokenizer's files one after another; when set, a "
       "tokenizer whose files differ is refused (a run folder sets it)"},
      {"train.batch_size", &c.train.batch_size, "windows per micro-step on each rank"},
      {"train.seq_len", &c.train.seq_len, "tokens per window, at most model.block_size"},
      {"train.total_batch_tokens", &c.train.total_batch_tokens,
       "tokens per optimizer step over all ranks, a multiple "
       "of batch_size x seq_len x ranks (0: one micro-step)"},
      {"train.max_steps", &c.train.max_steps, "optimizer steps of the run"},
      {"train.lr", &c.train.lr, "peak learning rate"},
      {"train.min_lr_frac", &c.train.min_lr_frac, "the learning rate at the end, as a fraction of lr"},
      {"train.warmup_steps", &c.train.warmup_steps, "steps of linear warm-up from 0 to lr"},
      {"train.schedule", choice(&c.train.schedule), "constant, cosine, linear or wsd (warm-up, stable, decay)"},
      {"train.weight_decay", &c.train.weight_decay, "AdamW's decoupled weight decay (matrices only)"},
      {"train.beta1", &c.train.beta1, "AdamW's first-moment decay"},
      {"train.beta2", &c.train.beta2, "AdamW's second-moment decay"},
      {"train.grad_clip", &c.train.grad_clip, "largest global gradient norm (0: no clipping)"},
      {"train.precision", choice(&c.train.precision),
       "fp32, bf16, fp16 (with loss scaling) or bf16-master (bf16 weights, "
       "fp32 masters)"},
      {"train.rounding", choice(&c.train.rounding), "bf16-master's bf16 copies: stochastic or nearest"},
      {"train.optimizer_state", choice(&c.train.optimizer_state),
       "AdamW's moments: fp32, or 8bit (bitsandbytes' blockwise 8-bit state: a quarter of the memory)"},
      {"train.optimizer_8bit_min_size", &c.train.optimizer_8bit_min_size,
       "8bit: tensors of fewer elements keep fp32 moments"},
      {"train.optimizer_paged", &c.train.optimizer_paged,
       "GPU: keep the moments in pinned host memory, read and written over the bus by the update (frees their "
       "device memory; paged optimizers' role)"},
      {"train.loss_scale", &c.train.loss_scale, "fp16: the first loss scale (halved at each overflow)"},
      {"train.loss_scale_growth_interval", &c.train.loss_scale_growth_interval,
       "fp16: steps without overflow after which the loss scale doubles"},
      {"train.seed", &c.train.seed, "seed of the initial weights, the data order, dropout and samples"},
      {"train.recompute", choice(&c.train.recompute),
       "activation recompute: none, mlp (each block's MLP computed again in backward, its 4x-wide "
       "intermediates not kept) or block (each whole block; only the residual stream kept): less memory for "
       "a second forward, the same gradients; needs no dropout (model.dropout, peft.dropout 0); steps run "
       "eagerly, not as CUDA graphs"},
      {"train.fp8", &c.train.fp8,
       "the linear layers' products in fp8 (inputs and weights e4m3, their gradients e5m2, each tensor scaled by "
       "its amax over the last fp8_history steps; the scales are kept in checkpoints); needs precision "
       "bf16-master and peft.method none. On a GPU with fp8 tensor cores cuBLASLt's fp8 products; on the CPU the "
       "reference path (ops/fp8.h): fp8's numbers, not its speed"},
      {"train.fp8_history", &c.train.fp8_history, "fp8: the steps of amaxes each scale is taken from"},
      {"train.fp8_margin", &c.train.fp8_margin, "fp8: each scale 2^margin below the largest that fits the amax"},
      {"train.fp8_skip", &c.train.fp8_skip, "fp8: linear layers kept in bf16, by name or dotted suffix"},
      {"train.cuda_graph", &c.train.cuda_graph, "one GPU: replay each micro-step as a CUDA graph"},
      {"train.bucket_mb", &c.train.bucket_mb, "several ranks: MiB of gradients per all-reduce"},
      {"train.zero", &c.train.zero, "several ranks: shard the optimizer state over them (ZeRO-1)"},
      {"train.quiet", &c.train.quiet, "print nothing while training (metrics.jsonl is still written)"},
      {"peft.method", choice(&c.peft.method),
       "none (every parameter trains), lora (adapters on a frozen base; checkpoints hold the adapters, in "
       "PEFT's files, and their optimizer state) or qlora (the same over a base held in 4-bit NF4 with double "
       "quantization: every linear layer but the head)"},
      {"peft.quantization", choice(&c.peft.quantization),
       "qlora: the frozen base's storage: nf4 (4-bit NormalFloat, blocks of 64, double quantization: bitsandbytes' "
       "QLoRA) or int8 (each row scaled by its absolute maximum: LLM.int8's weights)"},
      {"peft.r", &c.peft.r, "lora: the adapters' rank"},
      {"peft.alpha", &c.peft.alpha, "lora: lora_alpha; the adapters' output is scaled by alpha / r"},
      {"peft.dropout", &c.peft.dropout, "lora: dropout on the adapters' input while training"},
      {"peft.target_modules", &c.peft.target_modules,
       "lora: the linear layers adapted, by name or dotted suffix (q_proj, c_attn, ...), or [\"all-linear\"] "
       "(all but the head); empty: PEFT's default for the family (GPT-2 c_attn; the Llama family q_proj, "
       "v_proj)"},
      {"peft.target_regex", &c.peft.target_regex,
       "lora: in place of target_modules, a regular expression the layers' full names match"},
      {"peft.use_rslora", &c.peft.use_rslora, "lora: scale by alpha / sqrt(r) (rsLoRA)"},
      {"peft.modules_to_save", &c.peft.modules_to_save,
       "lora: modules trained in full beside the adapters and saved with them (e.g. [\"lm_head\"])"},
      {"peft.init", choice(&c.peft.init),
       "lora: default (B zero: the run starts as the base), gaussian (A normal with std 1/r, B zero) or "
       "random (both as linear layers start)"},
      {"peft.rank_pattern", ObjectField{&c.peft.rank_pattern},
       "lora: layer-name patterns and their own r (PEFT's rank_pattern); null: none"},
      {"peft.alpha_pattern", ObjectField{&c.peft.alpha_pattern},
       "lora: layer-name patterns and their own alpha (PEFT's alpha_pattern); null: none"},
      {"eval.every", &c.eval.every, "steps between evaluations (0: only at the end)"},
      {"eval.batches", &c.eval.batches, "batches of the validation data per evaluation"},
      {"eval.tasks", ObjectField{&c.eval.tasks, true},
       "tasks scored at each evaluation (eval/tasks.h), each {\"task\": hellaswag, choice or perplexity, "
       "\"data\": a file or a list of files, and optionally \"limit\", \"batch\", \"window\", \"stride\", "
       "\"skip_bad_lines\"}, as build/bin/evaluate's options; their scores go to metrics.jsonl and loss.svg"},
      {"checkpoint.every", &c.checkpoint.every, "steps between checkpoints (0: none, but on a signal)"},
      {"checkpoint.keep", &c.checkpoint.keep, "newest checkpoints kept"},
      {"sample.every", &c.sample.every, "steps between printed samples (0: none)"},
      {"sample.tokens", &c.sample.tokens, "most new tokens of a sample"},
      {"sample.prompt", &c.sample.prompt, "text a sample starts from (empty: a fresh document)"},
      {"sample.temperature", &c.sample.temperature, "sampling temperature (0: greedy)"},
      {"sample.top_k", &c.sample.top_k, "sample among the k most likely tokens (0: all)"},
      {"out_dir", &c.out_dir, "the run folder: config.json, metrics.jsonl, loss.svg, tokenizer/, checkpoints/"},
      {"device", choice(&c.device), "auto (a GPU when there is one), cpu or cuda"},
  };
}

// A field's value as JSON (a choice as its word).
template <typename P>
Json value_of(const P& p) {
  if constexpr (std::is_same_v<P, ChoiceField>) return p.get();
  else if constexpr (std::is_same_v<P, ObjectField>)
    return p.text->empty() ? (p.list ? Json::array() : Json()) : json::parse(*p.text, "config");
  else return *p;
}

// The JSON node at "a.b" inside `doc`, created when `create`.
Json* node(Json& doc, const std::string& key, bool create) {
  const size_t dot = key.find('.');
  if (dot == std::string::npos) return create || doc.contains(key) ? &doc[key] : nullptr;
  const std::string section = key.substr(0, dot), leaf = key.substr(dot + 1);
  if (!doc.contains(section)) {
    if (!create) return nullptr;
    doc[section] = Json::object();
  }
  Json& s = doc[section];
  if (!s.is_object()) return nullptr;
  return create || s.contains(leaf) ? &s[leaf] : nullptr;
}

void assign(const Field& f, const Json& v, const std::string& source) {
  const auto wrong = [&](const char* expected) {
    LLMTRAIN_CHECK(false, source, ": ", f.key, " must be ", expected, ", got ", json::excerpt(v));
  };
  const size_t dot = f.key.rfind('.');
  const std::string leaf = f.key.substr(dot == std::string::npos ? 0 : dot + 1);
  std::visit(
      [&](auto& p) {
        using T = std::remove_pointer_t<std::decay_t<decltype(p)>>;
        if constexpr (std::is_same_v<T, ChoiceField>) {
          LLMTRAIN_CHECK(v.is_string() && p.set(v.get<std::string>()), source, ": ", f.key, " must be ", p.words, ": ",
                         leaf, " ", json::excerpt(v), " is none of them");
        } else if constexpr (std::is_same_v<T, ObjectField>) {
          if (p.list &&
              (!v.is_array() || !std::all_of(v.begin(), v.end(), [](const Json& e) { return e.is_object(); })))
            wrong("a list of objects");
          if (!p.list && !v.is_object() && !v.is_null()) wrong("an object or null");
          *p.text = v.is_null() || (p.list && v.empty()) ? "" : v.dump();
        } else if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) wrong("a string");
          *p = v.get<std::string>();
        } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
          if (!v.is_array()) wrong("a list of strings");
          p->clear();
          for (const auto& e : v) {
            if (!e.is_string()) wrong("a list of strings");
            p->push_back(e.get<std::string>());
          }
        } else if constexpr (std::is_same_v<T, bool>) {
          if (!v.is_boolean()) wrong("true or false");
          *p = v.get<bool>();
        } else if constexpr (std::is_same_v<T, double>) {
          if (!v.is_number()) wrong("a number");
          *p = v.get<double>();
        } else if constexpr (std::is_same_v<T, uint64_t>) {
          if (!v.is_number_unsigned()) wrong("a non-negative integer");
          *p = v.get<uint64_t>();
        } else {
          if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(INT64_MAX)))
            wrong("an integer (64-bit)");
          *p = v.get<int64_t>();
        }
      },
      f.ptr);
}

// `from(key)`: where a key's value came from ("--set key=value" or the file), for the message.
void validate(const TrainerConfig& c, const std::function<std::string(const std::string&)>& from) {
  const auto at_least = [&](const char* key, int64_t v, int64_t min) {
    LLMTRAIN_CHECK(v >= min, from(key), ": ", key, " must be at least ", min, ", got ", v);
  };
  at_least("train.batch_size", c.train.batch_size, 1);
  at_least("train.bucket_mb", c.train.bucket_mb, 1);
  at_least("train.seq_len", c.train.seq_len, 1);
  at_least("train.max_steps", c.train.max_steps, 1);
  at_least("train.total_batch_tokens", c.train.total_batch_tokens, 0);
  at_least("train.warmup_steps", c.train.warmup_steps, 0);
  at_least("eval.every", c.eval.every, 0);
  at_least("eval.batches", c.eval.batches, 1);
  at_least("checkpoint.every", c.checkpoint.every, 0);
  at_least("checkpoint.keep", c.checkpoint.keep, 1);
  at_least("sample.every", c.sample.every, 0);
  at_least("sample.tokens", c.sample.tokens, 1);
  at_least("sample.top_k", c.sample.top_k, 0);
  LLMTRAIN_CHECK(c.sample.temperature >= 0, from("sample.temperature"), ": sample.temperature must be >= 0, got ",
                 c.sample.temperature);
  LLMTRAIN_CHECK(!c.out_dir.empty(), from("out_dir"), ": out_dir is empty");
  LLMTRAIN_CHECK(std::isfinite(c.train.loss_scale) && c.train.loss_scale >= 1, from("train.loss_scale"),
                 ": train.loss_scale must be a finite number >= 1, got ", c.train.loss_scale);
  at_least("train.loss_scale_growth_interval", c.train.loss_scale_growth_interval, 1);
  at_least("train.optimizer_8bit_min_size", c.train.optimizer_8bit_min_size, 1);
  const std::string& kind = c.tokenizer.kind;
  LLMTRAIN_CHECK(kind.empty() || kind == "gpt2" || kind == "sentencepiece" || kind == "hf", from("tokenizer.kind"),
                 ": tokenizer.kind must be gpt2, sentencepiece or hf (or empty), got \"", kind, "\"");
  LLMTRAIN_CHECK(!c.sft() || !kind.empty(), from("data.train"), ": data.train ", c.data.train,
                 " is SFT JSONL, which needs tokenizer.kind (gpt2, sentencepiece or hf)");
  LLMTRAIN_CHECK(c.sample.every == 0 || !kind.empty(), from("sample.every"),
                 ": sample.every > 0 needs tokenizer.kind (gpt2, sentencepiece or hf) to encode the prompt and print "
                 "text");
  const auto check = [&](const char* key, auto&& body) {
    try {
      body();
    } catch (const llmtrain::Error& e) {
      LLMTRAIN_CHECK(false, from(key), ": ", e.what());
    }
  };
  check("train.schedule", [&] { c.optimizer().schedule.validate(); });
  check("eval.tasks", [&] { c.eval.task_configs(); });
  LLMTRAIN_CHECK(c.eval.tasks.empty() || !kind.empty(), from("eval.tasks"),
                 ": eval.tasks needs tokenizer.kind (gpt2, sentencepiece or hf) to read the tasks' text");
  nn::ModelSpec spec = nn::GPT2Config();
  check(c.model.config.empty() ? "model.preset" : "model.config", [&] { spec = c.model.spec(); });
  LLMTRAIN_CHECK(c.train.seq_len <= spec.block_size(), from("train.seq_len"), ": train.seq_len ", c.train.seq_len,
                 " exceeds the model's block_size ", spec.block_size());
  LLMTRAIN_CHECK(!c.train.fp8 || c.train.precision == optim::Precision::kBF16Master, from("train.fp8"),
                 ": train.fp8 needs train.precision bf16-master (bf16 elsewhere, fp32 masters), got ",
                 c.train.precision.name());
  LLMTRAIN_CHECK(!c.train.fp8 || c.peft.method == PeftMethod::kNone, from("train.fp8"),
                 ": train.fp8 trains full weights; set peft.method none, got ", c.peft.method.name());
  LLMTRAIN_CHECK(c.train.fp8_history >= 1, from("train.fp8_history"), ": train.fp8_history must be >= 1, got ",
                 c.train.fp8_history);
  LLMTRAIN_CHECK(c.train.fp8_margin >= 0 && c.train.fp8_margin <= 64, from("train.fp8_margin"),
                 ": train.fp8_margin must be in [0, 64], got ", c.train.fp8_margin);
  LLMTRAIN_CHECK(c.train.recompute == nn::Recompute::kNone || c.model.dropout == 0, from("train.recompute"),
                 ": train.recompute ", c.train.recompute.name(),
                 " needs model.dropout 0 (a recomputed part would draw other dropout masks), got ", c.model.dropout);
  LLMTRAIN_CHECK(c.train.recompute == nn::Recompute::kNone || c.peft.method == PeftMethod::kNone || c.peft.dropout == 0,
                 from("train.recompute"), ": train.recompute ", c.train.recompute.name(),
                 " needs peft.dropout 0 (a recomputed adapter would draw other dropout masks), got ", c.peft.dropout);
  if (c.peft.method != PeftMethod::kNone) {
    at_least("peft.r", c.peft.r, 1);
    LLMTRAIN_CHECK(c.peft.dropout >= 0 && c.peft.dropout < 1, from("peft.dropout"),
                   ": peft.dropout must lie in [0, 1), got ", c.peft.dropout);
    LLMTRAIN_CHECK(std::isfinite(c.peft.alpha), from("peft.alpha"), ": peft.alpha must be finite");
    LLMTRAIN_CHECK(c.peft.target_regex.empty() || c.peft.target_modules.empty(), from("peft.target_regex"),
                   ": peft.target_regex and peft.target_modules are two ways to say the same: set one");
    check("peft", [&] { c.peft.lora(spec); });
  }
}

}  // namespace

nn::ModelSpec ModelConfig::spec() const {
  nn::ModelSpec s =
      config.empty() ? nn::ModelSpec::preset(preset) : io::detail::parse_hf_model_config(config, "model.config");
  if (s.is_gpt2()) {
    LLMTRAIN_CHECK(n_kv_head == 0 && intermediate_size == 0, "model.", n_kv_head ? "n_kv_head" : "intermediate_size",
                   " belongs to the Llama family, and this model is GPT-2");
    auto& g = s.gpt2();
    if (n_layer > 0) g.n_layer(n_layer);
    if (n_head > 0) g.n_head(n_head);
    if (n_embd > 0) g.n_embd(n_embd);
    if (block_size > 0) g.block_size(block_size);
    if (vocab_size > 0) g.vocab_size(vocab_size);
    g.dropout(dropout);
  } else {
    auto& l = s.llama();
    if (n_layer > 0) l.n_layer(n_layer);
    if (n_head > 0) l.n_head(n_head);
    if (n_embd > 0) l.hidden_size(n_embd);
    if (block_size > 0) l.block_size(block_size);
    if (vocab_size > 0) l.vocab_size(vocab_size);
    if (n_kv_head > 0) l.n_kv_head(n_kv_head);
    if (intermediate_size > 0) l.intermediate_size(intermediate_size);
    l.dropout(dropout);
  }
  s.validate();
  return s;
}

peft::LoraConfig PeftConfig::lora(const nn::ModelSpec& spec) const {
  peft::LoraConfig l;
  l.r = r;
  l.lora_alpha = alpha;
  l.lora_dropout = dropout;
  l.use_rslora = use_rslora;
  l.modules_to_save = modules_to_save;
  l.init = init;
  if (!target_regex.empty()) {
    try {
      std::regex check(target_regex);
    } catch (const std::regex_error&) {
      LLMTRAIN_CHECK(false, "peft.target_regex \"", target_regex, "\" is not a regular expression");
    }
    l.target_regex = target_regex;
  } else if (target_modules.size() == 1 && target_modules[0] == "all-linear") {
    l.all_linear = true;
  } else if (!target_modules.empty()) {
    l.target_modules = target_modules;
  } else {  // PEFT's defaults
    l.target_modules =
        spec.is_gpt2() ? std::vector<std::string>{"c_attn"} : std::vector<std::string>{"q_proj", "v_proj"};
  }
  const auto patterns = [](const std::string& text, const char* key, std::map<std::string, double>& out) {
    if (text.empty()) return;
    const Json j = json::parse(text, key);
    for (const auto& [name, v] : j.items()) {
      LLMTRAIN_CHECK(v.is_number() && v.get<double>() > 0, "peft.", key, ": ", name,
                     " must map to a positive number, got ", json::excerpt(v));
      out[name] = v.get<double>();
    }
  };
  std::map<std::string, double> ranks;
  patterns(rank_pattern, "rank_pattern", ranks);
  for (const auto& [name, v] : ranks) {
    LLMTRAIN_CHECK(v == std::floor(v), "peft.rank_pattern: ", name, " must map to an integer, got ", v);
    l.rank_pattern[name] = int64_t(v);
  }
  patterns(alpha_pattern, "alpha_pattern", l.alpha_pattern);
  return l;
}

optim::OptimizerOptions TrainerConfig::optimizer() const {
  optim::OptimizerOptions o;
  o.schedule.kind = train.schedule;
  o.schedule.lr = train.lr;
  o.schedule.warmup_steps = train.warmup_steps;
  o.schedule.max_steps = train.max_steps;
  o.schedule.min_lr_frac = train.min_lr_frac;
  o.beta1 = train.beta1;
  o.beta2 = train.beta2;
  o.weight_decay = train.weight_decay;
  o.grad_clip = train.grad_clip;
  o.precision = train.precision;
  o.stochastic_rounding = train.rounding == optim::Rounding::kStochastic;
  o.state = train.optimizer_state;
  o.min_8bit_size = train.optimizer_8bit_min_size;
  o.paged = train.optimizer_paged;
  o.scaler.init_scale = train.loss_scale;
  o.scaler.growth_interval = train.loss_scale_growth_interval;
  o.seed = train.seed;
  return o;
}

std::vector<eval::TaskConfig> EvalConfig::task_configs() const {
  std::vector<eval::TaskConfig> out;
  if (tasks.empty()) return out;
  const Json list = json::parse(tasks, "eval.tasks");
  for (size_t i = 0; i < list.size(); ++i) {
    const json::Object o(list[i], "eval.tasks", "eval.tasks[" + std::to_string(i) + "]");
    for (const auto& [key, v] : o.value().items())
      LLMTRAIN_CHECK(key == "task" || key == "data" || key == "limit" || key == "batch" || key == "window" ||
                         key == "stride" || key == "skip_bad_lines",
                     "eval.tasks[", i, "]: unknown key \"", key,
                     "\" (task, data, limit, batch, window, stride, "
                     "skip_bad_lines)");
    eval::TaskConfig t;
    t.task = o.string("task");
    LLMTRAIN_CHECK(t.task == "hellaswag" || t.task == "choice" || t.task == "perplexity", "eval.tasks[", i,
                   "].task must be hellaswag, choice or perplexity, got \"", t.task, "\"");
    const Json& data = o.at("data");
    if (data.is_string()) t.data = {data.get<std::string>()};
    else if (data.is_array() && !data.empty() &&
             std::all_of(data.begin(), data.end(), [](const Json& d) { return d.is_string(); }))
      t.data = data.get<std::vector<std::string>>();
    else LLMTRAIN_CHECK(false, "eval.tasks[", i, "].data must be a file or a list of files, got ", json::excerpt(data));
    if (o.has("limit")) t.limit = o.integer("limit", 0, INT64_MAX);
    if (o.has("batch")) t.batch = o.integer("batch", 0, INT64_MAX);
    if (o.has("window")) t.window = o.integer("window", 0, INT64_MAX);
    if (o.has("stride")) t.stride = o.integer("stride", 0, INT64_MAX);
    if (o.has("skip_bad_lines")) t.skip_bad = o.boolean("skip_bad_lines");
    out.push_back(std::move(t));
  }
  return out;
}

bool TrainerConfig::sft() const {
  const auto& t = data.train;
  return data.format == DataFormat::kSft ||
         (data.format == DataFormat::kAuto && t.size() >= 6 && t.compare(t.size() - 6, 6, ".jsonl") == 0);
}

TrainerConfig TrainerConfig::parse(const std::string& json_text, const std::string& source,
                                   const std::vector<std::string>& overrides) {
  Json doc = json::parse(json_text, source);
  LLMTRAIN_CHECK(doc.is_object(), source, ": expected a JSON object at the top");
  TrainerConfig cfg;
  const auto table = fields(cfg);
  const auto known = [&](const std::string& key) {
    for (const auto& f : table)
      if (f.key == key) return true;
    return false;
  };
  std::map<std::string, std::string> set_by;  // key -> the --set that gave its value
  for (const auto& o : overrides) {
    const size_t eq = o.find('=');
    LLMTRAIN_CHECK(eq != std::string::npos && eq > 0, "--set ", o, ": expected key=value");
    const std::string key = o.substr(0, eq), text = o.substr(eq + 1);
    LLMTRAIN_CHECK(known(key), "--set ", o, ": unknown key \"", key, "\"");
    LLMTRAIN_CHECK(!set_by.count(key), "--set ", o, ": ", key, " is already set by --set ", set_by[key]);
    Json value;
    try {
      value = json::parse(text, "--set " + o);
    } catch (const llmtrain::Error&) {
      // A bare word is a string; JSON (and the config's writing back) holds only valid UTF-8.
      const size_t bad = tokenizer::invalid_utf8_at(text);
      LLMTRAIN_CHECK(bad == std::string::npos, "--set ", key, ": the value is not valid UTF-8 (byte ", bad, ")");
      value = text;
    }
    Json* n = node(doc, key, true);
    LLMTRAIN_CHECK(n != nullptr, "--set ", o, ": ", key.substr(0, key.find('.')), " in ", source, " is not an object");
    *n = value;
    set_by[key] = o;
  }
  const auto from = [&](const std::string& key) {
    const auto it = set_by.find(key);
    return it == set_by.end() ? source : "--set " + it->second;
  };
  for (const auto& [top, value] : doc.items()) {
    bool section = false;
    for (const auto& f : table) section = section || f.key.rfind(top + ".", 0) == 0;
    if (value.is_object()) {
      LLMTRAIN_CHECK(section, source, ": unknown section \"", top, "\"");
      for (const auto& [leaf, v] : value.items())
        LLMTRAIN_CHECK(known(top + "." + leaf), source, ": unknown key \"", top, ".", leaf, "\"");
    } else {
      LLMTRAIN_CHECK(!section, source, ": ", top, " must be an object, got ", json::excerpt(value));
      LLMTRAIN_CHECK(known(top), source, ": unknown key \"", top, "\"");
    }
  }
  for (const auto& f : table)
    if (const Json* v = node(doc, f.key, false)) assign(f, *v, from(f.key));
  validate(cfg, from);
  return cfg;
}

TrainerConfig TrainerConfig::load(const std::string& path, const std::vector<std::string>& overrides) {
  TrainerConfig cfg = parse(fs::read_file(path, uint64_t(64) << 20), path, overrides);
  const size_t slash = path.rfind('/');
  cfg.tokenizer = tokenizer_in(cfg.tokenizer, slash == std::string::npos ? "." : path.substr(0, slash));
  return cfg;
}

// A tokenizer with its hash is one llmtrain copied beside the config (a run folder's): it lies there.
TokenizerConfig tokenizer_in(TokenizerConfig t, const std::string& dir) {
  if (!t.sha256.empty() && !t.path.empty() && t.path[0] != '/') t.path = dir + "/" + t.path;
  return t;
}

std::string tokenizer_dir(const TokenizerConfig& t) {
  if (t.kind != "sentencepiece") return t.path;
  const size_t slash = t.path.rfind('/');
  return slash == std::string::npos ? "." : t.path.substr(0, slash);
}

std::optional<int32_t> input_bos(const nn::ModelSpec& spec, const tokenizer::Tokenizer& tok) {
  return spec.is_gpt2() ? std::nullopt : tok.bos_id();
}

std::string TrainerConfig::reference() {
  TrainerConfig defaults;
  std::string out = "| key | type | default | meaning |\n|---|---|---|---|\n";
  for (const auto& f : fields(defaults)) {
    std::string type;
    Json value;
    std::visit(
        [&](auto& p) {
          using T = std::remove_pointer_t<std::decay_t<decltype(p)>>;
          if constexpr (std::is_same_v<T, ObjectField>) type = p.list ? "list of objects" : "object";
          else
            type = std::is_same_v<T, std::vector<std::string>>                        ? "list of strings"
                   : std::is_same_v<T, std::string> || std::is_same_v<T, ChoiceField> ? "string"
                   : std::is_same_v<T, bool>                                          ? "bool"
                   : std::is_same_v<T, double>                                        ? "number"
                   : std::is_same_v<T, uint64_t>                                      ? "integer >= 0"
                                                                                      : "integer";
          value = value_of(p);
        },
        f.ptr);
    out += "| `" + f.key + "` | " + type + " | `" + value.dump() + "` | " + f.doc + " |\n";
  }
  return out;
}

std::vector<std::string> TrainerConfig::keys() {
  TrainerConfig defaults;
  std::vector<std::string> out;
  for (const auto& f : fields(defaults)) out.push_back(f.key);
  return out;
}

std::string TrainerConfig::to_json() const {
  TrainerConfig copy = *this;
  Json doc = Json::object();
  for (const auto& f : fields(copy)) std::visit([&](auto& p) { *node(doc, f.key, true) = value_of(p); }, f.ptr);
  return doc.dump(2);
}

}  // namespace llmtrain::train
