#include "llmc_header.h"

#include <cstring>

#include "llmtrain/core/checked.h"
#include "llmtrain/core/error.h"

namespace llmtrain::io::detail {

LlmcHeader parse_llmc_header(const std::string& path, const unsigned char* head, uint64_t size, uint64_t file_size) {
  LLMTRAIN_CHECK(size >= uint64_t(kLlmcHeaderBytes), "llm.c model ", path, ": ", file_size, " bytes, shorter than the ",
                 kLlmcHeaderBytes, "-byte header");
  int32_t h[8];
  std::memcpy(h, head, sizeof h);
  LLMTRAIN_CHECK(h[0] == kLlmcMagic, "llm.c model ", path, ": magic number ", h[0], ", expected ", kLlmcMagic);
  LLMTRAIN_CHECK(h[1] == 3 || h[1] == 5, "llm.c model ", path, ": version ", h[1],
                 " is not supported (3: float32 weights, 5: bfloat16)");
  LlmcHeader r;
  r.version = h[1];
  r.max_seq_len = h[2];
  r.vocab_size = h[3];
  r.n_layer = h[4];
  r.n_head = h[5];
  r.n_embd = h[6];
  r.padded_vocab_size = h[7];
  r.element_bytes = r.version == 3 ? 4 : 2;
  const int64_t T = r.max_seq_len, V = r.vocab_size, L = r.n_layer, NH = r.n_head, C = r.n_embd,
                Vp = r.padded_vocab_size;
  LLMTRAIN_CHECK(T > 0 && V > 0 && L > 0 && NH > 0 && C > 0 && Vp >= V && C % NH == 0, "llm.c model ", path,
                 ": header max_seq_len ", T, ", vocab_size ", V, ", n_layer ", L, ", n_head ", NH, ", n_embd ", C,
                 ", padded_vocab_size ", Vp, " is not a model (sizes must be positive, padded_vocab_size >= ",
                 "vocab_size, n_embd a multiple of n_head)");
  // Per layer: ln_1 (2C), qkv (3C*C + 3C), attention projection (C*C + C), ln_2 (2C), fc (4C*C + 4C),
  // fc projection (4C*C + C); then wte (Vp*C), wpe (T*C) and ln_f (2C).
  const std::string what = "llm.c model " + path + ": the header's sizes";
  const int64_t per_layer = add_checked(product_checked({12, C, C}, what), product_checked({13, C}, what), what);
  int64_t n = product_checked({L, per_layer}, what);
  n = add_checked(n, product_checked({Vp, C}, what), what);
  n = add_checked(n, product_checked({T, C}, what), what);
  n = add_checked(n, product_checked({2, C}, what), what);
  r.num_parameters = n;
  const int64_t bytes = add_checked(kLlmcHeaderBytes, product_checked({n, r.element_bytes}, what), what);
  LLMTRAIN_CHECK(file_size == uint64_t(bytes), "llm.c model ", path, ": ", file_size, " bytes; its header describes ",
                 n, " parameters of ", r.element_bytes, " bytes after the ", kLlmcHeaderBytes, "-byte header, ", bytes,
                 " in all");
  return r;
}

}  // namespace llmtrain::io::detail
