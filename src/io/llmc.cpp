#include "llmtrain/io/llmc.h"

#include <cstring>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"

namespace llmtrain::io {
namespace {
constexpr int32_t kMagic = 20240326;
constexpr size_t kHeader = 256;  // int32 values
}  // namespace

nn::GPT2 load_llmc_gpt2(const std::string& path) {
  LLMTRAIN_CHECK(fs::exists(path), "llm.c model ", path, ": no such file");
  const std::string bytes = fs::read_file(path);
  LLMTRAIN_CHECK(bytes.size() >= kHeader * 4, "llm.c model ", path, ": ", bytes.size(), " bytes, shorter than the ",
                 kHeader * 4, "-byte header");
  int32_t h[kHeader];
  std::memcpy(h, bytes.data(), sizeof h);
  LLMTRAIN_CHECK(h[0] == kMagic, "llm.c model ", path, ": magic number ", h[0], ", expected ", kMagic);
  LLMTRAIN_CHECK(h[1] == 3 || h[1] == 5, "llm.c model ", path, ": version ", h[1],
                 " is not supported (3: float32 weights, 5: bfloat16)");
  const int64_t T = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
  LLMTRAIN_CHECK(T > 0 && V > 0 && L > 0 && NH > 0 && C > 0 && Vp >= V, "llm.c model ", path,
                 ": header max_seq_len ", T, ", vocab_size ", V, ", n_layer ", L, ", n_head ", NH, ", n_embd ", C,
                 ", padded_vocab_size ", Vp, " is not a model");
  const auto cfg = nn::GPT2Config().vocab_size(V).block_size(T).n_layer(L).n_head(NH).n_embd(C).dropout(0.0);
  cfg.validate();
  // The 16 tensors' shapes, in file order.
  const std::vector<std::vector<int64_t>> shapes = {
      {Vp, C}, {T, C},      {L, C}, {L, C}, {L, 3 * C, C}, {L, 3 * C}, {L, C, C}, {L, C},
      {L, C},  {L, C},      {L, 4 * C, C}, {L, 4 * C}, {L, C, 4 * C}, {L, C}, {C}, {C}};
  const torch::ScalarType dtype = h[1] == 3 ? torch::kFloat : torch::kBFloat16;
  const size_t elem = h[1] == 3 ? 4 : 2;
  size_t numel = 0;
  for (const auto& s : shapes) {
    size_t n = 1;
    for (int64_t d : s) n *= size_t(d);
    numel += n;
  }
  LLMTRAIN_CHECK(bytes.size() == kHeader * 4 + numel * elem, "llm.c model ", path, ": ", bytes.size(),
                 " bytes; its header describes ", numel, " parameters of ", elem, " bytes after the ", kHeader * 4,
                 "-byte header, ", kHeader * 4 + numel * elem, " in all");
  const torch::Tensor all = torch::from_blob(const_cast<char*>(bytes.data()) + kHeader * 4, {int64_t(numel)},
                                             torch::TensorOptions().dtype(dtype))
                                .to(torch::kFloat);  // views `bytes` for float32: copied into the model below
  std::vector<torch::Tensor> t;
  int64_t at = 0;
  for (const auto& s : shapes) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    t.push_back(all.narrow(0, at, n).view(s));
    at += n;
  }
  nn::GPT2 model(cfg);
  torch::NoGradGuard no_grad;
  auto& tr = model->transformer;
  const int64_t rows = std::min(V, cfg.padded_vocab_size());
  tr->wte->weight.zero_();
  tr->wte->weight.narrow(0, 0, rows).copy_(t[0].narrow(0, 0, rows));  // llm.c's padding rows are not ours
  tr->wpe->weight.copy_(t[1]);
  auto p = model->named_parameters();
  for (int64_t l = 0; l < L; ++l) {
    const std::string b = "transformer.h." + std::to_string(l) + ".";
    p[b + "ln_1.weight"].copy_(t[2][l]);
    p[b + "ln_1.bias"].copy_(t[3][l]);
    p[b + "attn.c_attn.weight"].copy_(t[4][l]);
    p[b + "attn.c_attn.bias"].copy_(t[5][l]);
    p[b + "attn.c_proj.weight"].copy_(t[6][l]);
    p[b + "attn.c_proj.bias"].copy_(t[7][l]);
    p[b + "ln_2.weight"].copy_(t[8][l]);
    p[b + "ln_2.bias"].copy_(t[9][l]);
    p[b + "mlp.c_fc.weight"].copy_(t[10][l]);
    p[b + "mlp.c_fc.bias"].copy_(t[11][l]);
    p[b + "mlp.c_proj.weight"].copy_(t[12][l]);
    p[b + "mlp.c_proj.bias"].copy_(t[13][l]);
  }
  tr->ln_f->weight.copy_(t[14]);
  tr->ln_f->bias.copy_(t[15]);
  return model;
}

}  // namespace llmtrain::io
