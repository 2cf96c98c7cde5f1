// The header of llm.c's model files (llmtrain/io/llmc.h has the layout), read and checked without
// LibTorch, so that the fuzzers reach it: every size is checked against the file's, with overflow-checked
// arithmetic, before anything is allocated for it.
#pragma once

#include <cstdint>
#include <string>

namespace llmtrain::io::detail {

constexpr int32_t kLlmcMagic = 20240326;
constexpr int64_t kLlmcHeaderBytes = 256 * 4;

struct LlmcHeader {
  int32_t version = 0;  // 3: float32 weights, 5: bfloat16
  int64_t max_seq_len = 0, vocab_size = 0, n_layer = 0, n_head = 0, n_embd = 0, padded_vocab_size = 0;
  int64_t num_parameters = 0;  // of the 16 tensors, llm.c's padded vocabulary included
  int64_t element_bytes = 0;
};

/// The header in the first `size` bytes of `head` (at least kLlmcHeaderBytes) of the file `path`, whose
/// whole size is `file_size`. Throws llmtrain::Error naming the file for a short file, a bad magic
/// number or version, sizes that are not positive, n_embd not a multiple of n_head, or a file whose size
/// is not what the header describes.
LlmcHeader parse_llmc_header(const std::string& path, const unsigned char* head, uint64_t size, uint64_t file_size);

}  // namespace llmtrain::io::detail
