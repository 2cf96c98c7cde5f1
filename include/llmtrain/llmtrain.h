// Everything public in llmtrain, for programs that would rather include one header.
#pragma once

#include "llmtrain/config.h"
#include "llmtrain/core/cuda_check.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"
#include "llmtrain/data/dataloader.h"
#include "llmtrain/data/prepare.h"
#include "llmtrain/data/shard.h"
#include "llmtrain/nn/gpt2.h"
#include "llmtrain/ops/attention.h"
#include "llmtrain/ops/cross_entropy.h"
#include "llmtrain/ops/gelu.h"
#include "llmtrain/ops/layer_norm.h"
#include "llmtrain/tokenizer/gpt2_bpe.h"
#include "llmtrain/tokenizer/sentencepiece.h"
#include "llmtrain/tokenizer/tokenizer.h"
