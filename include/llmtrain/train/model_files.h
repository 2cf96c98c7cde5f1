// Models on disk in every form llmtrain reads (its checkpoints, Hugging Face folders, llm.c files) and
// writes, with their tokenizers; the configurations checkpoints and fine-tuning runs carry.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "llmtrain/core/fs.h"
#include "llmtrain/nn/causal_lm.h"
#include "llmtrain/train/config.h"

namespace llmtrain::train {

/// The model of a checkpoint: `path` is a checkpoint folder (…/checkpoints/step_XXXXXXXX) or a run's
/// out_dir, whose newest complete checkpoint is taken. Throws llmtrain::Error naming what is missing.
/// The model's family is the checkpoint's (state.json records its shape).
///   auto model = llmtrain::train::load_checkpoint_model("runs/sotu_gpt2_124m");
std::shared_ptr<nn::CausalLM> load_checkpoint_model(const std::string& path);

/// The model at `path`, whatever its kind and family: a Hugging Face folder (io::load_hf_model: GPT-2,
/// Llama, Mistral, Qwen2), an llm.c model file ending in .bin (io::load_llmc_gpt2), or a checkpoint as
/// for load_checkpoint_model.
///   auto model = llmtrain::train::load_model("Llama-3.2-1B");  // a save_pretrained folder
std::shared_ptr<nn::CausalLM> load_model(const std::string& path);

/// The family and shape of the model at `path` (as load_model reads it), read without loading it.
nn::ModelSpec model_spec_at(const std::string& path);

/// Writes `model` alone (no optimizer state: a run starts from it, it does not resume) as a checkpoint
/// folder that load_checkpoint_model, model.init_from and finetune --from read, through
/// fs::write_dir_atomic (`options`: what it may replace). `tokenizer`'s files are copied in and its
/// config names them; without one, a GPT-2's config names GPT-2's tokenizer (found as load_tokenizer
/// finds it), another family's none.
void save_model_checkpoint(const std::shared_ptr<nn::CausalLM>& model, const std::string& dir,
                           const fs::OutputOptions& options = {},
                           const std::optional<TokenizerConfig>& tokenizer = std::nullopt);

/// io::save_hf_model (the model's family) with `tokenizer` beside the weights, as transformers' AutoTokenizer reads it:
/// GPT-2 BPE as vocab.json + merges.txt (GPT2Tokenizer), SentencePiece as tokenizer.model (LlamaTokenizer, adding no
/// bos or eos, as llmtrain encodes), with tokenizer_config.json and special_tokens_map.json; config.json's bos_token_id
/// and eos_token_id are the tokenizer's end-of-text id.
///   llmtrain::train::save_hf_model(model, "exported", {}, llmtrain::train::model_tokenizer("runs/demo/model"));
void save_hf_model(const std::shared_ptr<nn::CausalLM>& model, const std::string& dir,
                   const fs::OutputOptions& options = {},
                   const std::optional<TokenizerConfig>& tokenizer = std::nullopt);

/// The tokenizer of the model at `path` (as load_model reads it): a checkpoint's or run folder's own copy
/// (its path inside the folder, its sha256 checked when loaded), a Hugging Face folder's tokenizer.model
/// or vocab.json + merges.txt; none for an llm.c file or a folder without tokenizer files.
///   auto tok = llmtrain::train::load_tokenizer(*llmtrain::train::model_tokenizer("runs/demo/model"));
std::optional<TokenizerConfig> model_tokenizer(const std::string& path);

/// The configuration a checkpoint was trained with; `path` as for load_checkpoint_model.
TrainerConfig load_checkpoint_config(const std::string& path);

/// The configuration of a fine-tuning run: the JSON file `config_path` (data, tokenizer, train, eval,
/// ... of the new run) with the model of `from`, a checkpoint or a Hugging Face folder of any family (its
/// shape; the file may set only model.dropout) and model.init_from = `from`; the tokenizer section is
/// the checkpoint's or the folder's unless the file has one; then `overrides`. Throws llmtrain::Error
/// naming the file or key at fault.
///   auto cfg = llmtrain::train::finetune_config("runs/base", "examples/configs/finetune_sft.json", {});
TrainerConfig finetune_config(const std::string& from, const std::string& config_path,
                              const std::vector<std::string>& overrides = {});

}  // namespace llmtrain::train
