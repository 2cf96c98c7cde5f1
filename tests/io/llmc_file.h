// A GPT-2 in llm.c's model-file layout, for tests: its header and its 16 tensors, each holding all
// layers, in llm.c's order.
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "llmtrain/nn/gpt2.h"

namespace llmtrain::testing {

// model's weights in llm.c's file layout; Vp rows of wte (the extra ones random, which llmtrain drops).
inline std::string llmc_bytes(llmtrain::nn::GPT2& model, int32_t version, int64_t Vp) {
  const auto& c = model->cfg;
  const int64_t L = c.n_layer(), C = c.n_embd(), V = c.vocab_size();
  int32_t header[256] = {};
  header[0] = 20240326;
  header[1] = version;
  header[2] = int32_t(c.block_size());
  header[3] = int32_t(V);
  header[4] = int32_t(L);
  header[5] = int32_t(c.n_head());
  header[6] = int32_t(C);
  header[7] = int32_t(Vp);
  auto p = model->named_parameters();
  const auto layers = [&](const std::string& name) {
    std::vector<torch::Tensor> t;
    for (int64_t l = 0; l < L; ++l) t.push_back(p["transformer.h." + std::to_string(l) + "." + name]);
    return torch::stack(t);
  };
  const auto wte = torch::cat({p["transformer.wte.weight"].narrow(0, 0, V), torch::randn({Vp - V, C})});
  std::vector<torch::Tensor> order = {wte, p["transformer.wpe.weight"]};
  for (const char* n :
       {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight", "attn.c_proj.bias",
        "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias", "mlp.c_proj.weight", "mlp.c_proj.bias"})
    order.push_back(layers(n));
  order.push_back(p["transformer.ln_f.weight"]);
  order.push_back(p["transformer.ln_f.bias"]);
  std::string out(reinterpret_cast<const char*>(header), sizeof header);
  for (const auto& t : order) {
    const auto flat = t.detach().to(version == 3 ? torch::kFloat : torch::kBFloat16).contiguous();
    out.append(static_cast<const char*>(flat.data_ptr()), size_t(flat.nbytes()));
  }
  return out;
}

}  // namespace llmtrain::testing
