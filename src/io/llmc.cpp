#include "llmtrain/io/llmc.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <iterator>

#include "llmtrain/core/error.h"
#include "llmtrain/core/fs.h"

namespace llmtrain::io {
namespace {
constexpr int32_t kMagic = 20240326;
constexpr size_t kHeader = 256;  // int32 values
}  // namespace

namespace {

// The GPT-2's tensors after wte and wpe, each holding all layers, in file order.
const char* const kLayerTensors[] = {"ln_1.weight",       "ln_1.bias",       "attn.c_attn.weight", "attn.c_attn.bias",
                                     "attn.c_proj.weight", "attn.c_proj.bias", "ln_2.weight",        "ln_2.bias",
                                     "mlp.c_fc.weight",    "mlp.c_fc.bias",    "mlp.c_proj.weight",  "mlp.c_proj.bias"};

struct Header {
  nn::GPT2Config cfg;
  int32_t version;
  int64_t padded_vocab;
};

// The header of `bytes` (at least its first kHeader int32), checked.
Header parse_header(const std::string& path, const char* bytes, size_t size) {
  LLMTRAIN_CHECK(size >= kHeader * 4, "llm.c model ", path, ": ", size, " bytes, shorter than the ", kHeader * 4,
                 "-byte header");
  int32_t h[kHeader];
  std::memcpy(h, bytes, sizeof h);
  LLMTRAIN_CHECK(h[0] == kMagic, "llm.c model ", path, ": magic number ", h[0], ", expected ", kMagic);
  LLMTRAIN_CHECK(h[1] == 3 || h[1] == 5, "llm.c model ", path, ": version ", h[1],
                 " is not supported (3: float32 weights, 5: bfloat16)");
  const int64_t T = h[2], V = h[3], L = h[4], NH = h[5], C = h[6], Vp = h[7];
  LLMTRAIN_CHECK(T > 0 && V > 0 && L > 0 && NH > 0 && C > 0 && Vp >= V, "llm.c model ", path,
                 ": header max_seq_len ", T, ", vocab_size ", V, ", n_layer ", L, ", n_head ", NH, ", n_embd ", C,
                 ", padded_vocab_size ", Vp, " is not a model");
  const auto cfg = nn::GPT2Config().vocab_size(V).block_size(T).n_layer(L).n_head(NH).n_embd(C).dropout(0.0);
  cfg.validate();
  return {cfg, h[1], Vp};
}

}  // namespace

bool is_llmc_file(const std::string& path) {
  struct stat st {};
  return path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0 && ::stat(path.c_str(), &st) == 0 &&
         S_ISREG(st.st_mode);
}

nn::GPT2Config llmc_gpt2_config(const std::string& path) {
  LLMTRAIN_CHECK(fs::exists(path), "llm.c model ", path, ": no such file");
  std::ifstream in(path, std::ios::binary);
  std::string head(kHeader * 4, '\0');
  in.read(head.data(), std::streamsize(head.size()));
  return parse_header(path, head.data(), size_t(in.gcount())).cfg;
}

nn::GPT2 load_llmc_gpt2(const std::string& path) {
  LLMTRAIN_CHECK(fs::exists(path), "llm.c model ", path, ": no such file");
  const std::string bytes = fs::read_file(path);
  const Header h = parse_header(path, bytes.data(), bytes.size());
  const nn::GPT2Config& cfg = h.cfg;
  const int64_t T = cfg.block_size(), V = cfg.vocab_size(), L = cfg.n_layer(), C = cfg.n_embd();
  // The 16 tensors' shapes, in file order: wte (padded its own way), wpe, kLayerTensors, ln_f.
  const std::vector<std::vector<int64_t>> shapes = {
      {h.padded_vocab, C}, {T, C},     {L, C}, {L, C}, {L, 3 * C, C}, {L, 3 * C}, {L, C, C}, {L, C},
      {L, C},              {L, C},     {L, 4 * C, C}, {L, 4 * C}, {L, C, 4 * C}, {L, C}, {C}, {C}};
  const auto count = [](const std::vector<int64_t>& s) {
    int64_t n = 1;
    for (int64_t d : s) n *= d;
    return n;
  };
  const torch::ScalarType dtype = h.version == 3 ? torch::kFloat : torch::kBFloat16;
  const size_t elem = h.version == 3 ? 4 : 2;
  size_t numel = 0;
  for (const auto& s : shapes) numel += size_t(count(s));
  LLMTRAIN_CHECK(bytes.size() == kHeader * 4 + numel * elem, "llm.c model ", path, ": ", bytes.size(),
                 " bytes; its header describes ", numel, " parameters of ", elem, " bytes after the ", kHeader * 4,
                 "-byte header, ", kHeader * 4 + numel * elem, " in all");
  const torch::Tensor all = torch::from_blob(const_cast<char*>(bytes.data()) + kHeader * 4, {int64_t(numel)},
                                             torch::TensorOptions().dtype(dtype))
                                .to(torch::kFloat);  // views `bytes` for float32: copied into the model below
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
