// What the programs that run a model (generate, evaluate) share: the model loaded where and in the
// precision asked, a PEFT adapter merged in, and its tokenizer (its own unless one is named).
#pragma once

#include <llmtrain/core/error.h>
#include <llmtrain/peft/lora.h>
#include <llmtrain/train/model_files.h>
#include <torch/cuda.h>
#include <CLI/CLI.hpp>

#include <memory>
#include <string>

namespace llmtrain_cli {

/// --device and --dtype, as load_model_on takes them.
inline void add_device_options(CLI::App& app, std::string& device, std::string& dtype) {
  app.add_option("--device", device, "auto, cpu or cuda")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--dtype", dtype, "auto (bfloat16 on cuda, float32 on cpu), float32 or bfloat16")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "float32", "bfloat16"}));
}

/// The model at `checkpoint` (any format load_model reads) with `adapter` merged (empty: none), on
/// `device` (auto, cpu or cuda) in `dtype` (auto: bfloat16 on cuda, float32 on cpu; float32; bfloat16).
inline std::shared_ptr<llmtrain::nn::CausalLM> load_model_on(const std::string& checkpoint, const std::string& adapter,
                                                             const std::string& device, const std::string& dtype) {
  auto model = llmtrain::train::load_model(checkpoint);
  if (!adapter.empty()) llmtrain::peft::merge_lora(*model, adapter);
  const bool cuda = device == "cuda" || (device == "auto" && torch::cuda::is_available());
  LLMTRAIN_CHECK(!cuda || torch::cuda::is_available(), "--device cuda, but no CUDA device is visible");
  const bool bf16 = dtype == "bfloat16" || (dtype == "auto" && cuda);
  model->module().to(cuda ? torch::kCUDA : torch::kCPU, bf16 ? torch::kBFloat16 : torch::kFloat);
  return model;
}

/// A program's tokenizer and its folder: the model's own at `checkpoint` (a run's copy, a Hugging Face
/// folder's files) unless one is named (`kind` gpt2 or sentencepiece, `vocab_dir`, `model_file`), else GPT-2's.
struct ModelTokenizer {
  std::unique_ptr<llmtrain::tokenizer::Tokenizer> tok;
  std::string dir;
};
inline ModelTokenizer model_tokenizer(const std::string& checkpoint, const std::string& kind,
                                      const std::string& vocab_dir, const std::string& model_file) {
  const auto own = kind.empty() && vocab_dir.empty() && model_file.empty()
                       ? llmtrain::train::model_tokenizer(checkpoint)
                       : std::nullopt;
  llmtrain::train::TokenizerConfig named;
  named.kind = !kind.empty() ? kind : model_file.empty() ? "gpt2" : "sentencepiece";
  named.path = named.kind == "sentencepiece" ? model_file : vocab_dir;
  return {llmtrain::train::load_tokenizer(own ? *own : named), llmtrain::train::tokenizer_dir(own ? *own : named)};
}

}  // namespace llmtrain_cli
