// Models on disk in every form llmtrain reads: its own checkpoints, Hugging Face folders and llm.c
// files; and the configurations a checkpoint or a fine-tuning run carries.
#include "llmtrain/train/model_files.h"

#include <unistd.h>

#include <algorithm>

#include "../core/json.h"
#include "../io/hf_config.h"
#include "checkpoint_state.h"
#include "llmtrain/core/error.h"
#include "llmtrain/io/hf_model.h"
#include "llmtrain/io/llmc.h"
#include "llmtrain/peft/lora.h"
#include "llmtrain/train/checkpointer.h"
#include "torch_files.h"

namespace llmtrain::train {

using Json = json::Json;

TrainerConfig load_checkpoint_config(const std::string& path) {
  const std::string dir = checkpoint_dir(path);
  const auto state = detail::CheckpointState::read(dir);
  TrainerConfig cfg = TrainerConfig::parse(state.config, "checkpoint " + dir + "/state.json's config");
  cfg.tokenizer = tokenizer_in(cfg.tokenizer, dir);  // the checkpoint's own copy
  const nn::ModelSpec spec = cfg.model.spec();
  LLMTRAIN_CHECK(state.model.same_shape(spec), "checkpoint ", dir, "/state.json: model says ", state.model.describe(),
                 " but its config says ", spec.describe());
  return cfg;
}

namespace {

// A run's configuration with the model of `spec` (the rest the defaults): GPT-2's shape as the model
// keys, with GPT-2's tokenizer; another family's as model.config, without a tokenizer.
TrainerConfig config_of_model(const nn::ModelSpec& spec) {
  TrainerConfig c;
  if (spec.is_gpt2()) {
    const nn::GPT2Config& g = spec.gpt2();
    LLMTRAIN_CHECK(g.layer_norm_eps() == nn::GPT2Config().layer_norm_eps(), "a model with layer_norm_epsilon ",
                   g.layer_norm_eps(), " has no llmtrain checkpoint form (its configs keep GPT-2's ",
                   nn::GPT2Config().layer_norm_eps(), ")");
    c.model.n_layer = g.n_layer();
    c.model.n_head = g.n_head();
    c.model.n_embd = g.n_embd();
    c.model.block_size = g.block_size();
    c.model.vocab_size = g.vocab_size();
    c.model.dropout = g.dropout();
    c.tokenizer.kind = "gpt2";
  } else {
    c.model.config =
        json::parse(io::detail::hf_llama_config_json(spec.llama(), "float32", -1, -1), "model.config").dump();
    c.model.dropout = spec.llama().dropout();
  }
  c.train.seq_len = std::min(c.train.seq_len, spec.block_size());  // the default must fit the model
  return c;
}

// The configuration a fine-tuning run starts from: a checkpoint's, or the model of a Hugging Face folder
// or an llm.c file.
TrainerConfig source_config(const std::string& from) {
  if (io::is_hf_dir(from) || io::is_llmc_file(from)) return config_of_model(model_spec_at(from));
  return load_checkpoint_config(from);
}

}  // namespace

std::shared_ptr<nn::CausalLM> load_model(const std::string& path) {
  if (io::is_hf_dir(path)) return io::load_hf_model(path);
  if (io::is_llmc_file(path)) return io::load_llmc_gpt2(path).ptr();
  return load_checkpoint_model(path);
}

nn::ModelSpec model_spec_at(const std::string& path) {
  if (io::is_hf_dir(path)) return io::hf_model_spec(path);
  if (io::is_llmc_file(path)) return io::llmc_gpt2_config(path);
  return detail::CheckpointState::read(checkpoint_dir(path)).model;
}

std::optional<TokenizerConfig> model_tokenizer(const std::string& path) {
  if (io::is_hf_dir(path)) {
    TokenizerConfig t;
    // A SentencePiece model first: Llama 2's and Mistral's folders also hold a tokenizer.json of its kind.
    if (fs::exists(path + "/tokenizer.model")) t = {"sentencepiece", path + "/tokenizer.model", ""};
    else if (fs::exists(path + "/tokenizer.json")) t = {"hf", path, ""};
    else if (fs::exists(path + "/vocab.json") && fs::exists(path + "/merges.txt")) t = {"gpt2", path, ""};
    else return std::nullopt;
    return t;
  }
  if (io::is_llmc_file(path)) return std::nullopt;
  const TrainerConfig cfg = load_checkpoint_config(path);
  if (cfg.tokenizer.kind.empty()) return std::nullopt;
  return cfg.tokenizer;
}

void save_model_checkpoint(const std::shared_ptr<nn::CausalLM>& model, const std::string& dir,
                           const fs::OutputOptions& options, const std::optional<TokenizerConfig>& tokenizer) {
  const nn::ModelSpec spec = model->spec();
  const TrainerConfig cfg = config_of_model(spec);
  const bool bf16 = model->module().parameters().front().scalar_type() == torch::kBFloat16;
  fs::write_dir_atomic(dir, "checkpoint", options, [&](const std::string& tmp) {
    detail::save_torch(model->module().shared_from_this(), tmp + "/model.pt");
    TrainerConfig c = cfg;
    if (tokenizer) c.tokenizer = copy_tokenizer(*tokenizer, tmp);
    if (bf16) c.train.precision = optim::Precision::kBF16Master;  // how load_checkpoint_model knows to cast
    detail::CheckpointState state;
    state.model_only = true;
    state.model = spec;
    state.precision = c.train.precision;
    state.config = c.to_json();
    fs::write_file_atomic(tmp + "/state.json", state.to_json());
  });
}

void save_hf_model(const std::shared_ptr<nn::CausalLM>& model, const std::string& dir, const fs::OutputOptions& options,
                   const std::optional<TokenizerConfig>& tokenizer) {
  io::HfExtras extras;
  if (!tokenizer) {
    io::save_hf_model(model, dir, options, extras);
    return;
  }
  const auto tok = load_tokenizer(*tokenizer);
  LLMTRAIN_CHECK(tok->vocab_size() <= model->vocab_size(), "tokenizer ", tokenizer->kind, " ", tokenizer->path, " has ",
                 tok->vocab_size(), " ids, more than the model's vocab_size ", model->vocab_size());
  // GPT-2's documents start and end with the end-of-text id: it is both bos and eos. The Llama
  // family's inputs start with the tokenizer's bos (train::input_bos), where it has one.
  const auto first = input_bos(model->spec(), *tok);
  extras.eos_id = tok->eot_id() ? std::optional<int64_t>(*tok->eot_id()) : std::nullopt;
  extras.bos_id = first ? std::optional<int64_t>(*first) : extras.eos_id;
  const std::string eot = tok->eot_text().value_or("");
  const std::string bos = first ? tok->bos_text().value_or("") : eot;
  extras.write = [&](const std::string& tmp) {
    const auto files = tokenizer::tokenizer_files(tokenizer->kind, tokenizer->path);
    Json config = {{"model_max_length", model->block_size()}, {"clean_up_tokenization_spaces", false}};
    if (tokenizer->kind == "gpt2") {
      fs::write_file_atomic(tmp + "/vocab.json", fs::read_file(files[0], uint64_t(1) << 30, "tokenizer"));
      fs::write_file_atomic(tmp + "/merges.txt", fs::read_file(files[1], uint64_t(1) << 30, "tokenizer"));
      config.update({{"tokenizer_class", "GPT2Tokenizer"}, {"add_prefix_space", false}, {"unk_token", eot}});
    } else if (tokenizer->kind == "hf") {
      fs::write_file_atomic(tmp + "/tokenizer.json", fs::read_file(files[0], uint64_t(1) << 30, "tokenizer"));
      config["tokenizer_class"] = "PreTrainedTokenizerFast";
      if (files.size() > 1) {  // the folder's own settings (its chat template among them) over ours
        const Json own = json::parse_file(files[1], uint64_t(64) << 20);
        if (own.is_object()) config.update(own);
      }
    } else {
      fs::write_file_atomic(tmp + "/tokenizer.model", fs::read_file(files[0], uint64_t(1) << 30, "tokenizer"));
      // A SentencePiece model as llmtrain encodes with it: the bos first for the Llama family, no eos.
      config.update({{"tokenizer_class", "LlamaTokenizer"},
                     {"add_bos_token", first.has_value()},
                     {"add_eos_token", false},
                     {"legacy", true}});
    }
    if (!eot.empty()) config.update({{"bos_token", bos}, {"eos_token", eot}, {"pad_token", eot}});
    fs::write_file_atomic(tmp + "/tokenizer_config.json", config.dump(2) + "\n");
    Json special = Json::object();
    if (!eot.empty()) special = {{"bos_token", bos}, {"eos_token", eot}, {"pad_token", eot}};
    fs::write_file_atomic(tmp + "/special_tokens_map.json", special.dump(2) + "\n");
  };
  io::save_hf_model(model, dir, options, extras);
}

std::shared_ptr<nn::CausalLM> load_checkpoint_model(const std::string& path) {
  const std::string dir = checkpoint_dir(path);
  const auto cfg = load_checkpoint_config(dir);
  if (cfg.peft.method != PeftMethod::kNone) {  // adapters: on their base (QLoRA's in NF4), merged
    const std::string& base = cfg.model.init_from;
    std::shared_ptr<nn::CausalLM> model;
    if (base.empty()) {  // the run's random base, drawn again as the Trainer drew it
      torch::manual_seed(cfg.train.seed);
      model = nn::make_model(cfg.model.spec());
    } else {
      LLMTRAIN_CHECK(fs::exists(base), "checkpoint ", dir, " holds LoRA adapters of the base model ", base,
                     " (its run's model.init_from), which is not there");
      model = load_model(base);
    }
    peft::load_lora(*model, dir);
    if (cfg.peft.method == PeftMethod::kQLora) peft::quantize_base(*model, cfg.peft.quantization);
    peft::merge_lora(*model);
    return model;
  }
  // The shape comes from state.json: model.pt must be able to hold it before anything is allocated.
  uint64_t bytes = 0;
  ::close(fs::open_regular(dir + "/model.pt", &bytes, "checkpoint"));
  const nn::ModelSpec spec = cfg.model.spec();
  const int64_t params = spec.stored_parameters();
  const bool bf16 = cfg.train.precision == optim::Precision::kBF16Master;
  const uint64_t least = uint64_t(params) * (bf16 ? 2 : 4);
  LLMTRAIN_CHECK(bytes >= least, "checkpoint ", dir, ": model.pt holds ", bytes, " bytes, too few for the ", params,
                 " parameters its state.json describes (", least, " bytes at least)");
  auto model = nn::make_model(spec);
  if (bf16) model->module().to(torch::kBFloat16);
  detail::load_part(dir, "model.pt", [&](const std::string& p) {
    auto module = model->module().shared_from_this();
    torch::load(module, p);
  });
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

}  // namespace llmtrain::train
