#include "checkpoint_state.h"

#include <cstdint>

#include "../core/json.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/optim/options.h"

namespace llmtrain::train::detail {
namespace {

using json::Json;
constexpr const char* kFormat = "llmtrain-checkpoint";
constexpr int kVersion = 1;

}  // namespace

std::string CheckpointState::to_json() const {
  Json doc = {{"format", kFormat},
              {"version", kVersion},
              {"step", step},
              {"elapsed_s", elapsed_s},
              {"model",
               {{"vocab_size", model.vocab_size()},
                {"block_size", model.block_size()},
                {"n_layer", model.n_layer()},
                {"n_head", model.n_head()},
                {"n_embd", model.n_embd()}}},
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
  const json::Object m = o.object("model");
  const int64_t big = int64_t(1) << 40;  // GPT2Config::validate applies the real limits
  s.model.vocab_size(m.integer("vocab_size", 1, big))
      .block_size(m.integer("block_size", 1, big))
      .n_layer(m.integer("n_layer", 1, big))
      .n_head(m.integer("n_head", 1, big))
      .n_embd(m.integer("n_embd", 1, big));
  try {
    s.model.validate();
  } catch (const llmtrain::Error& e) {
    LLMTRAIN_CHECK(false, source, ": model: ", e.what());
  }
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

bool same_shape(const nn::GPT2Config& a, const nn::GPT2Config& b) {
  return a.vocab_size() == b.vocab_size() && a.block_size() == b.block_size() && a.n_layer() == b.n_layer() &&
         a.n_head() == b.n_head() && a.n_embd() == b.n_embd();
}

std::string shape_text(const nn::GPT2Config& c) {
  return "vocab_size " + std::to_string(c.vocab_size()) + ", block_size " + std::to_string(c.block_size()) +
         ", n_layer " + std::to_string(c.n_layer()) + ", n_head " + std::to_string(c.n_head()) + ", n_embd " +
         std::to_string(c.n_embd());
}

}  // namespace llmtrain::train::detail
