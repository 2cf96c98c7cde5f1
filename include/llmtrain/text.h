// Everything public in llmtrain::text, the library without LibTorch: the tokenizers, the shard format,
// data preparation, and the core they stand on. Link llmtrain::text (CMake) to use it alone.
#pragma once

#include "llmtrain/config.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/core/types.h"
#include "llmtrain/data/chat.h"
#include "llmtrain/data/prepare.h"
#include "llmtrain/data/shard.h"
#include "llmtrain/tokenizer/gpt2_bpe.h"
#include "llmtrain/tokenizer/hf_tokenizer.h"
#include "llmtrain/tokenizer/sentencepiece.h"
#include "llmtrain/tokenizer/tokenizer.h"
