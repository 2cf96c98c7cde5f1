// convert: a model (GPT-2, Llama, Mistral, Qwen2) from one checkpoint format to another.
//   build/bin/convert --from hf gpt2/ --to native runs/gpt2_base
//   build/bin/convert --from llmc gpt2_124M.bin --to hf exported/
//   build/bin/convert --from native runs/sotu_gpt2_124m --to hf exported/
// native: an llmtrain checkpoint folder or a run's out_dir (newest checkpoint) in; a model-only
// checkpoint out, which finetune --from and model.init_from read. hf: a Hugging Face folder
// (config.json, model.safetensors) with the model's tokenizer (tokenizer_config.json, and vocab.json +
// merges.txt or tokenizer.model) for transformers' AutoTokenizer. llmc: an llm.c model file (in only).
// --adapter merges a PEFT LoRA adapter folder (adapter_config.json, adapter_model.safetensors) into the
// model first, so that the output is the fine-tuned model, plain:
//   build/bin/convert --from hf Llama-3.2-1B --adapter my-lora --to hf Llama-3.2-1B-tuned
#include <llmtrain/llmtrain.h>
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli.h"

int main(int argc, char** argv) {
  CLI::App app{"Convert a model between llmtrain, Hugging Face and llm.c (GPT-2) formats"};
  llmtrain_cli::setup(app, "convert --from native runs/demo/model --to hf exported/demo");
  std::vector<std::string> from, to;
  app.add_option("--from", from, "FORMAT IN: native | hf | llmc, and the path")->required()->expected(2);
  app.add_option("--to", to, "FORMAT OUT: native | hf, and the path")->required()->expected(2);
  bool force = false;
  app.add_flag("--force", force, "replace an existing output that llmtrain did not write");
  std::string kind, tok_path;
  app.add_option("--tokenizer", kind,
                 "the tokenizer to carry (gpt2 or sentencepiece; default: the model's own, "
                 "GPT-2's for an llm.c file)")
      ->check(CLI::IsMember({"gpt2", "sentencepiece"}));
  app.add_option("--tokenizer-path", tok_path, "its GPT-2 folder or .model file");
  std::string adapter;
  app.add_option("--adapter", adapter, "a PEFT LoRA adapter folder to merge into the model");
  CLI11_PARSE(app, argc, argv);
  try {
    std::shared_ptr<llmtrain::nn::CausalLM> model;
    if (from[0] == "native") model = llmtrain::train::load_checkpoint_model(from[1]);
    else if (from[0] == "hf") model = llmtrain::io::load_hf_model(from[1]);
    else if (from[0] == "llmc") model = llmtrain::io::load_llmc_gpt2(from[1]).ptr();
    else throw llmtrain::Error("--from " + from[0] + ": expected native, hf or llmc");
    if (!adapter.empty()) {
      const auto layers = llmtrain::peft::merge_lora(*model, adapter);
      std::printf("merged adapter %s into %zu layers\n", adapter.c_str(), layers.size());
    }
    std::optional<llmtrain::train::TokenizerConfig> tok = llmtrain::train::model_tokenizer(from[1]);
    if (!kind.empty()) tok = llmtrain::train::TokenizerConfig{kind, tok_path, ""};
    else if (!tok && from[0] == "llmc") tok = llmtrain::train::TokenizerConfig{"gpt2", tok_path, ""};
    std::vector<std::string> inputs = {from[1]};
    if (!adapter.empty()) inputs.push_back(adapter);
    const llmtrain::fs::OutputOptions out{"--to " + to[0], inputs, force};
    if (to[0] == "native") llmtrain::train::save_model_checkpoint(model, to[1], out, tok);
    else if (to[0] == "hf") llmtrain::train::save_hf_model(model, to[1], out, tok);
    else throw llmtrain::Error("--to " + to[0] + ": expected native or hf");
    std::printf("%s %s -> %s %s (%.1fM parameters; tokenizer: %s)\n", from[0].c_str(), from[1].c_str(), to[0].c_str(),
                to[1].c_str(), double(model->num_parameters()) / 1e6,
                tok ? (tok->kind + (tok->path.empty() ? "" : " " + tok->path)).c_str() : "none");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "convert: %s\n", llmtrain::describe(e).c_str());
    return 1;
  }
  return 0;
}
