#include "llmtrain/io/hf_model.h"

#include "hf_config.h"
#include "hf_weights.h"
#include "llmtrain/core/error.h"
#include "llmtrain/io/hf_llama.h"

namespace llmtrain::io {

nn::ModelSpec hf_model_spec(const std::string& dir) {
  std::string path;
  const std::string text = detail::read_hf_config(dir, &path);
  return detail::parse_hf_model_config(text, path);
}

std::shared_ptr<nn::CausalLM> load_hf_model(const std::string& dir) {
  if (hf_model_spec(dir).is_gpt2()) return load_hf_gpt2(dir).ptr();
  return load_hf_llama(dir).ptr();
}

void save_hf_model(const std::shared_ptr<nn::CausalLM>& model, const std::string& dir, const fs::OutputOptions& options,
                   const HfExtras& extras) {
  LLMTRAIN_CHECK(model, "save_hf_model: no model");
  if (auto gpt2 = std::dynamic_pointer_cast<nn::GPT2Impl>(model)) {
    nn::GPT2 holder(gpt2);
    save_hf_gpt2(holder, dir, options, extras);
  } else if (auto llama = std::dynamic_pointer_cast<nn::LlamaImpl>(model)) {
    nn::Llama holder(llama);
    save_hf_llama(holder, dir, options, extras);
  } else {
    LLMTRAIN_CHECK(false, "save_hf_model: a ", model->spec().family(), " model has no Hugging Face writer");
  }
}

}  // namespace llmtrain::io
