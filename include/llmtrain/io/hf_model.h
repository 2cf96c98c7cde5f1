// Hugging Face folders of any family llmtrain implements: config.json's model_type picks GPT-2
// (hf_gpt2.h) or the Llama family (hf_llama.h), and each family's reader and writer does the rest.
#pragma once

#include <memory>
#include <string>

#include "llmtrain/core/fs.h"
#include "llmtrain/io/hf_gpt2.h"
#include "llmtrain/nn/causal_lm.h"

namespace llmtrain::io {

/// The family and shape config.json in `dir` describes. Throws llmtrain::Error naming the file and
/// model_type for a family llmtrain does not implement, and the key for an option it does not.
nn::ModelSpec hf_model_spec(const std::string& dir);

/// A float32 model with the folder's weights, of the family config.json names.
///   auto model = llmtrain::io::load_hf_model("Llama-3.2-1B");
std::shared_ptr<nn::CausalLM> load_hf_model(const std::string& dir);

/// Writes `model` as its family's Hugging Face folder (save_hf_gpt2, save_hf_llama).
void save_hf_model(const std::shared_ptr<nn::CausalLM>& model, const std::string& dir,
                   const fs::OutputOptions& options = {}, const HfExtras& extras = {});

}  // namespace llmtrain::io
