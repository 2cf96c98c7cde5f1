#include "checkpoint_state.h"

#include <cstdint>

#include "../core/json.h"
#include "../io/hf_config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/optim/options.h"

namespace llmtrain::train::detail {
namespace {

using json::Json;
constexpr const char* kFormat = "llmtrain-checkpoint";
constexpr int kVersion = 1;

// A model's family and shape as state.json keeps it: GPT-2's five sizes (the form of the first
// checkpoints, which had no family), a Llama-family model's config.json as Hugging Face writes it.
Json model_json(const nn::ModelSpec& spec) {
  if (!spec.is_gpt2())
    return {{"family", spec.family()},
            {"config", json::parse(io::detail::hf_llama_config_json(spec.llama(), "float32", -1, -1), "config")}};
  const nn::GPT2Config& g = spec.gpt2();
  return {{"family", "gpt2"},       {"vocab_size", g.vocab_size()}, {"block_size", g.block_size()},
          {"n_layer", g.n_layer()}, {"n_head", g.n_head()},         {"n_embd", g.n_embd()}};
}

nn::ModelSpec parse_model(const json::Object& m, const std::string& source) {
  const std::string family = m.has("family") ? m.string("family") : "gpt2";
  if (family != "gpt2") {
    nn::LlamaFamily f{};
    LLMTRAIN_CHECK(Choice<nn::LlamaFamily>::find(family, &f), source, ": model.family \"", family,
                   "\" is not one llmtrain implements (gpt2, ", Choice<nn::LlamaFamily>::names(), ")");
    const nn::LlamaConfig c = io::detail::parse_hf_llama_config(
        json::Object(m.at("config"), source, "model.config").value().dump(), source + " model.config");
    LLMTRAIN_CHECK(c.family() == f, source, ": model.family ", family, " differs from its config's model_type ",
                   c.family());
    return c;
  }
  const int64_t big = int64_t(1) << 40;  // GPT2Config::validate applies the real limits
  nn::GPT2Config g;
  g.vocab_size(m.integer("vocab_size", 1, big))
      .block_size(m.integer("block_size", 1, big))
      .n_layer(m.integer("n_layer", 1, big))
      .n_head(m.integer("n_head", 1, big))
      .n_embd(m.integer("n_embd", 1, big));
  try {
    g.validate();
  } catch (const llmtrain::Error& e) {
    LLMTRAIN_CHECK(false, source, ": model: ", e.what());
  }
  return g;
}

}  // namespace

std::string CheckpointState::to_json() const {
  Json doc = {{"format", kFormat},
              {"version", kVersion},
              {"step", step},
              {"elapsed_s", elapsed_s},
              {"model", model_json(model)},
              {"precision", precision.name()},
              {"config", json::parse(config, "the run's config")}};
  if (model_only) {
    doc["model_only"] = true;
  } else {
    doc["zero_ranks"] = zero_ranks;
    doc["scaler"] = {{"scale", loss_scale}, {"good_steps", good_steps}};
    doc["train_loader"] = {{"epoch", epoch}, {"shard", shard}, {"position", position}};
  }
  return doc.dump(2);
}

CheckpointState CheckpointState::parse(const std::string& text, const std::string& source) {
  const Json doc = json::parse(text, source);
  const json::Object o(doc, source);
  LLMTRAIN_CHECK(o.has("format") && o.at("format") == kFormat && o.has("version") && o.at("version") == kVersion,
                 source, ": not an llmtrain checkpoint state of version ", kVersion, " (format \"", kFormat, "\")");
  CheckpointState s;
  s.model_only = o.has("model_only") && o.boolean("model_only");
  s.step = o.integer("step", 0, INT64_MAX);
  s.elapsed_s = o.number("elapsed_s", 0, 1e15);
  s.model = parse_model(o.object("model"), source);
  try {
    s.precision = optim::parse_precision(o.string("precision"));
  } catch (const llmtrain::Error& e) {
    LLMTRAIN_CHECK(false, source, ": ", e.what());
  }
  s.config = json::Object(o.at("config"), source, "config").value().dump();
  if (s.model_only) return s;
  s.zero_ranks = o.integer("zero_ranks", 0, int64_t(1) << 24);
  const json::Object scaler = o.object("scaler");
  s.loss_scale = scaler.number("scale", 1e-30, 1e38);
  s.good_steps = scaler.integer("good_steps", 0, INT64_MAX);
  const json::Object loader = o.object("train_loader");
  s.epoch = loader.integer("epoch", 0, INT64_MAX);
  s.shard = loader.integer("shard", 0, INT64_MAX);
  s.position = loader.integer("position", 0, INT64_MAX);
  return s;
}

CheckpointState CheckpointState::read(const std::string& dir) {
  return parse(fs::read_file(dir + "/state.json", uint64_t(64) << 20), "checkpoint " + dir + "/state.json");
}

}  // namespace llmtrain::train::detail
