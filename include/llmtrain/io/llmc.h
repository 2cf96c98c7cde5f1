// llm.c's GPT-2 model files (gpt2_124M.bin and the checkpoints train_gpt2.cu writes): 256 int32 of
// header (magic 20240326, version 3 for float32 or 5 for bfloat16 weights, then max_seq_len,
// vocab_size, n_layer, n_head, n_embd, padded_vocab_size), then the 16 parameter tensors one after
// another, each holding all layers: wte (Vp, C), wpe (T, C), ln1 w/b (L, C), qkv w (L, 3C, C) / b
// (L, 3C), attention projection w (L, C, C) / b (L, C), ln2 w/b (L, C), fc w (L, 4C, C) / b (L, 4C),
// fc projection w (L, C, 4C) / b (L, C), ln_f w/b (C). Weights are (out, in), as llmtrain's.
#pragma once

#include <string>

#include "llmtrain/nn/gpt2.h"

namespace llmtrain::io {

/// True when `path` is a file (not a folder) whose name ends in .bin: what load_model takes for llm.c's.
bool is_llmc_file(const std::string& path);

/// The model shape an llm.c model file's header describes (the header alone is read); errors as below.
nn::GPT2Config llmc_gpt2_config(const std::string& path);

/// A float32 GPT-2 with the weights of an llm.c model file. Throws llmtrain::Error naming the file for
/// a bad magic number or version, a header out of range, or a size that does not match the header.
///   nn::GPT2 model = llmtrain::io::load_llmc_gpt2("gpt2_124M.bin");
nn::GPT2 load_llmc_gpt2(const std::string& path);

}  // namespace llmtrain::io
