#include "llmtrain/io/llmc.h"

#include <sys/stat.h>
#include <unistd.h>

#include <iterator>

#include "llmc_header.h"
#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"

namespace llmtrain::io {
namespace {

// The GPT-2's tensors after wte and wpe, each holding all layers, in file order.
const char* const kLayerTensors[] = {"ln_1.weight",        "ln_1.bias",        "attn.c_attn.weight", "attn.c_attn.bias",
                                     "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
                                     "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

nn::GPT2Config config_of(const detail::LlmcHeader& h) {
  const auto cfg = nn::GPT2Config()
                       .vocab_size(h.vocab_size)
                       .block_size(h.max_seq_len)
                       .n_layer(h.n_layer)
                       .n_head(h.n_head)
                       .n_embd(h.n_embd)
                       .dropout(0.0);
  cfg.validate();
  return cfg;
}

}  // namespace

bool is_llmc_file(const std::string& path) {
  struct stat st {};
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0 && ::stat(path.c_str(), &st) == 0 &&
         S_ISREG(st.st_mode);
}

nn::GPT2Config llmc_gpt2_config(const std::string& path) {
  uint64_t size = 0;
  const int fd = fs::open_regular(path, &size, "llm.c model");
  unsigned char head[detail::kLlmcHeaderBytes];
  const ssize_t got = ::pread(fd, head, sizeof head, 0);
  ::close(fd);
  return config_of(detail::parse_llmc_header(path, head, got < 0 ? 0 : uint64_t(got), size));
}

nn::GPT2 load_llmc_gpt2(const std::string& path) {
  const fs::MappedFile file(path, "llm.c model");
  const detail::LlmcHeader h = detail::parse_llmc_header(path, file.data(), file.size(), file.size());
  const nn::GPT2Config cfg = config_of(h);
  const int64_t T = cfg.block_size(), V = cfg.vocab_size(), L = cfg.n_layer(), C = cfg.n_embd();
  // The 16 tensors' shapes, in file order: wte (padded its own way), wpe, kLayerTensors, ln_f.
  const std::vector<std::vector<int64_t>> shapes = {{h.padded_vocab_size, C},
                                                    {T, C},
                                                    {L, C},
                                                    {L, C},
                                                    {L, 3 * C, C},
                                                    {L, 3 * C},
                                                    {L, C, C},
                                                    {L, C},
                                                    {L, C},
                                                    {L, C},
                                                    {L, 4 * C, C},
                                                    {L, 4 * C},
                                                    {L, C, 4 * C},
                                                    {L, C},
                                                    {C},
                                                    {C}};
  const auto count = [](const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;  // within num_parameters, which the header check bounded
    return n;
  };
  const torch::ScalarType dtype = h.version == 3 ? torch::kFloat : torch::kBFloat16;
  // A read-only view of the mapping, copied into the model below (bfloat16: converted first).
  const torch::Tensor all =
      torch::from_blob(file.data() + detail::kLlmcHeaderBytes, {h.num_parameters}, torch::TensorOptions().dtype(dtype))
          .to(torch::kFloat);
  std::vector<torch::Tensor> t;
  int64_t at = 0;
  for (const auto& s : shapes) {
    t.push_back(all.narrow(0, at, count(s)).view(s));
    at += count(s);
  }
  nn::GPT2 model(cfg);
  torch::NoGradGuard no_grad;
  auto& tr = model->transformer;
  tr->wte->weight.zero_();
  tr->wte->weight.narrow(0, 0, V).copy_(t[0].narrow(0, 0, V));  // llm.c's padding rows are not ours
  tr->wpe->weight.copy_(t[1]);
  auto p = model->named_parameters();
  for (int64_t l = 0; l < L; ++l)
    for (size_t k = 0; k < std::size(kLayerTensors); ++k)
      p["transformer.h." + std::to_string(l) + "." + kLayerTensors[k]].copy_(t[2 + k][l]);
  tr->ln_f->weight.copy_(t[14]);
  tr->ln_f->bias.copy_(t[15]);
  return model;
}

}  // namespace llmtrain::io
