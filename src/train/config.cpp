// One table lists every key with its field, so parsing, type checks, overrides and to_json() cannot
// drift apart.
#include "llmtrain/train/config.h"

#include <cstdint>
#include <variant>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "../core/json.h"

namespace llmtrain::train {
namespace {

using Json = json::Json;
using FieldPtr = std::variant<int64_t*, uint64_t*, double*, bool*, std::string*>;

struct Field {
  std::string key;  // "train.lr", or "out_dir" at the top
  FieldPtr ptr;
};

std::vector<Field> fields(TrainerConfig& c) {
  return {
      {"model.preset", &c.model.preset},         {"model.n_layer", &c.model.n_layer},
      {"model.n_head", &c.model.n_head},         {"model.n_embd", &c.model.n_embd},
      {"model.block_size", &c.model.block_size}, {"model.vocab_size", &c.model.vocab_size},
      {"model.dropout", &c.model.dropout},       {"model.init_from", &c.model.init_from},
      {"data.train", &c.data.train},             {"data.val", &c.data.val},
      {"data.format", &c.data.format},           {"data.pack", &c.data.pack},
      {"data.shuffle", &c.data.shuffle},         {"data.shuffle_unit", &c.data.shuffle_unit},
      {"tokenizer.kind", &c.tokenizer.kind},     {"tokenizer.path", &c.tokenizer.path},
      {"train.batch_size", &c.train.batch_size},
      {"train.seq_len", &c.train.seq_len},       {"train.total_batch_tokens", &c.train.total_batch_tokens},
      {"train.max_steps", &c.train.max_steps},   {"train.lr", &c.train.lr},
      {"train.min_lr_frac", &c.train.min_lr_frac}, {"train.warmup_steps", &c.train.warmup_steps},
      {"train.schedule", &c.train.schedule},     {"train.weight_decay", &c.train.weight_decay},
      {"train.beta1", &c.train.beta1},           {"train.beta2", &c.train.beta2},
      {"train.grad_clip", &c.train.grad_clip},   {"train.precision", &c.train.precision},
      {"train.rounding", &c.train.rounding},     {"train.seed", &c.train.seed},             {"train.cuda_graph", &c.train.cuda_graph},
      {"train.bucket_mb", &c.train.bucket_mb},   {"train.zero", &c.train.zero},   {"eval.every", &c.eval.every},
      {"eval.batches", &c.eval.batches},         {"checkpoint.every", &c.checkpoint.every},
      {"checkpoint.keep", &c.checkpoint.keep},   {"sample.every", &c.sample.every},
      {"sample.tokens", &c.sample.tokens},       {"sample.prompt", &c.sample.prompt},
      {"sample.temperature", &c.sample.temperature}, {"sample.top_k", &c.sample.top_k},
      {"out_dir", &c.out_dir},                   {"device", &c.device},
  };
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
  std::visit(
      [&](auto* p) {
        using T = std::remove_pointer_t<decltype(p)>;
        if constexpr (std::is_same_v<T, std::string>) {
          if (!v.is_string()) wrong("a string");
          *p = v.get<std::string>();
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

void validate(const TrainerConfig& c, const std::string& source) {
  const auto at_least = [&](const char* key, int64_t v, int64_t min) {
    LLMTRAIN_CHECK(v >= min, source, ": ", key, " must be at least ", min, ", got ", v);
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
  LLMTRAIN_CHECK(c.sample.temperature >= 0, source, ": sample.temperature must be >= 0, got ", c.sample.temperature);
  LLMTRAIN_CHECK(c.device == "auto" || c.device == "cpu" || c.device == "cuda", source, ": device must be auto, cpu or cuda, got \"",
                 c.device, "\"");
  LLMTRAIN_CHECK(!c.out_dir.empty(), source, ": out_dir is empty");
  LLMTRAIN_CHECK(c.data.format == "auto" || c.data.format == "shards" || c.data.format == "sft", source,
                 ": data.format must be auto, shards or sft, got \"", c.data.format, "\"");
  LLMTRAIN_CHECK(c.data.shuffle_unit == "window" || c.data.shuffle_unit == "batch", source,
                 ": data.shuffle_unit must be window or batch, got \"", c.data.shuffle_unit, "\"");
  LLMTRAIN_CHECK(c.train.rounding == "stochastic" || c.train.rounding == "nearest", source,
                 ": train.rounding must be stochastic or nearest, got \"", c.train.rounding, "\"");
  LLMTRAIN_CHECK(c.tokenizer.kind.empty() || c.tokenizer.kind == "gpt2" || c.tokenizer.kind == "sentencepiece", source,
                 ": tokenizer.kind must be gpt2 or sentencepiece (or empty), got \"", c.tokenizer.kind, "\"");
  LLMTRAIN_CHECK(!c.sft() || !c.tokenizer.kind.empty(), source, ": data.train ", c.data.train,
                 " is SFT JSONL, which needs tokenizer.kind (gpt2 or sentencepiece)");
  LLMTRAIN_CHECK(c.sample.every == 0 || !c.tokenizer.kind.empty(), source,
                 ": sample.every > 0 needs tokenizer.kind (gpt2 or sentencepiece) to encode the prompt and print text");
  try {
    optim::parse_precision(c.train.precision);
    c.optimizer().schedule.validate();
    c.model.gpt2().validate();
  } catch (const llmtrain::Error& e) {
    LLMTRAIN_CHECK(false, source, ": ", e.what());
  }
  LLMTRAIN_CHECK(c.train.seq_len <= c.model.gpt2().block_size(), source, ": train.seq_len ", c.train.seq_len,
                 " exceeds the model's block_size ", c.model.gpt2().block_size());
}

}  // namespace

nn::GPT2Config ModelConfig::gpt2() const {
  auto g = nn::GPT2Config::preset(preset);
  if (n_layer > 0) g.n_layer(n_layer);
  if (n_head > 0) g.n_head(n_head);
  if (n_embd > 0) g.n_embd(n_embd);
  if (block_size > 0) g.block_size(block_size);
  if (vocab_size > 0) g.vocab_size(vocab_size);
  g.dropout(dropout);
  return g;
}

optim::OptimizerOptions TrainerConfig::optimizer() const {
  optim::OptimizerOptions o;
  o.schedule.kind = optim::parse_schedule(train.schedule);
  o.schedule.lr = train.lr;
  o.schedule.warmup_steps = train.warmup_steps;
  o.schedule.max_steps = train.max_steps;
  o.schedule.min_lr_frac = train.min_lr_frac;
  o.beta1 = train.beta1;
  o.beta2 = train.beta2;
  o.weight_decay = train.weight_decay;
  o.grad_clip = train.grad_clip;
  o.precision = optim::parse_precision(train.precision);
  o.stochastic_rounding = train.rounding == "stochastic";
  o.seed = train.seed;
  return o;
}

bool TrainerConfig::sft() const {
  const auto& t = data.train;
  return data.format == "sft" || (data.format == "auto" && t.size() >= 6 && t.compare(t.size() - 6, 6, ".jsonl") == 0);
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
  for (const auto& o : overrides) {
    const size_t eq = o.find('=');
    LLMTRAIN_CHECK(eq != std::string::npos && eq > 0, "--set ", o, ": expected key=value");
    const std::string key = o.substr(0, eq), text = o.substr(eq + 1);
    LLMTRAIN_CHECK(known(key), "--set ", o, ": unknown key \"", key, "\"");
    Json value;
    try {
      value = json::parse(text, "--set " + o);
    } catch (const llmtrain::Error&) {
      value = text;  // a bare word is a string
    }
    Json* n = node(doc, key, true);
    LLMTRAIN_CHECK(n != nullptr, "--set ", o, ": ", key.substr(0, key.find('.')), " in ", source, " is not an object");
    *n = value;
  }
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
    if (const Json* v = node(doc, f.key, false)) assign(f, *v, source);
  validate(cfg, source);
  return cfg;
}

TrainerConfig TrainerConfig::load(const std::string& path, const std::vector<std::string>& overrides) {
  return parse(fs::read_file(path, uint64_t(64) << 20), path, overrides);
}

std::string TrainerConfig::to_json() const {
  TrainerConfig copy = *this;
  Json doc = Json::object();
  for (const auto& f : fields(copy)) std::visit([&](auto* p) { *node(doc, f.key, true) = *p; }, f.ptr);
  return doc.dump(2);
}

}  // namespace llmtrain::train
