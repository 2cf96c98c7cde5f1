// The Llama family on ATen and llmtrain's ops (the linear products, attention and the loss), written
// to compute what transformers computes in float32: the rotary tables and RMSNorm in float32, the
// grouped keys and values repeated head by head as its repeat_kv does.
#include "llmtrain/nn/llama.h"

#include <torch/nn/init.h>

#include <cmath>
#include <tuple>

#include "llmtrain/core/error.h"
#include "llmtrain/core/types.h"
#include "llmtrain/nn/adapter.h"
#include "llmtrain/ops/attention.h"
#include "llmtrain/ops/cross_entropy.h"
#include "llmtrain/ops/gelu.h"
#include "llmtrain/ops/layer_norm.h"
#include "llmtrain/ops/linear.h"
#include "lm_inputs.h"
#include "recompute.h"

namespace llmtrain::nn {
namespace {

torch::nn::Linear make_linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

}  // namespace

torch::Tensor rope_frequencies(const LlamaConfig& cfg, const torch::Device& device) {
  const int64_t D = cfg.resolved_head_dim();
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat).device(device);
  auto inv =
      1.0 / torch::pow(cfg.rope_theta(), torch::arange(0, D, 2, f32.dtype(torch::kLong)).to(torch::kFloat) / double(D));
  inv = inv.to(f32);
  switch (cfg.rope_scaling().value()) {
    case RopeScaling::kNone: break;
    case RopeScaling::kLinear: inv = inv / cfg.rope_factor(); break;
    case RopeScaling::kLlama3: {
      // Wavelengths longer than the trained context / low_freq_factor are stretched by factor, those
      // shorter than context / high_freq_factor kept, the ones between blended smoothly.
      const double old = double(cfg.rope_original_max_positions()), factor = cfg.rope_factor();
      const double low = cfg.rope_low_freq_factor(), high = cfg.rope_high_freq_factor();
      const auto wavelen = 2.0 * M_PI / inv;
      auto scaled = torch::where(wavelen > old / low, inv / factor, inv);
      const auto smooth = (old / wavelen - low) / (high - low);
      const auto blended = (1 - smooth) * scaled / factor + smooth * scaled;
      const auto medium = (wavelen >= old / high) & (wavelen <= old / low);
      inv = torch::where(medium, blended, scaled);
      break;
    }
  }
  return inv;
}

namespace {

// Where a query t may see key s, (1 or B, 1, T, T) bool: within its document (packed rows), and within
// the last `window` keys (Mistral). Undefined: plainly causal.
torch::Tensor attention_mask(const LlamaConfig& cfg, const torch::Tensor& idx, const torch::Tensor& position_ids) {
  const int64_t T = idx.size(1), W = cfg.sliding_window();
  const bool windowed = W > 0 && T > W;
  if (!position_ids.defined() && !windowed) return {};
  torch::Tensor mask;
  if (position_ids.defined()) {
    mask = ops::document_mask(position_ids);
  } else {
    mask =
        torch::ones({T, T}, torch::TensorOptions().dtype(torch::kBool).device(idx.device())).tril().view({1, 1, T, T});
  }
  if (windowed) {  // key s within the last W positions of query t: t - s < W
    const auto t = torch::arange(T, torch::TensorOptions().dtype(torch::kLong).device(idx.device()));
    mask = mask & (t.view({T, 1}) - t.view({1, T}) < W).view({1, 1, T, T});
  }
  return mask.expand({idx.size(0), 1, T, T});
}

}  // namespace

RMSNormImpl::RMSNormImpl(int64_t size_, double eps_) : size(size_), eps(eps_) { reset(); }

void RMSNormImpl::reset() { weight = register_parameter("weight", torch::ones({size})); }

torch::Tensor RMSNormImpl::forward(const torch::Tensor& x) { return ops::rms_norm(x, weight, eps); }

LlamaAttentionImpl::LlamaAttentionImpl(LlamaConfig cfg_) : cfg(std::move(cfg_)) { reset(); }

void LlamaAttentionImpl::reset() {
  const int64_t C = cfg.hidden_size(), D = cfg.resolved_head_dim();
  q_proj = register_module("q_proj", make_linear(C, cfg.n_head() * D, cfg.qkv_bias()));
  k_proj = register_module("k_proj", make_linear(C, cfg.n_kv_head() * D, cfg.qkv_bias()));
  v_proj = register_module("v_proj", make_linear(C, cfg.n_kv_head() * D, cfg.qkv_bias()));
  o_proj = register_module("o_proj", make_linear(cfg.n_head() * D, C, cfg.o_bias()));
}

torch::Tensor LlamaAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                          const torch::Tensor& mask, const LayerCache* cache) {
  const int64_t B = x.size(0), T = x.size(1), D = cfg.resolved_head_dim(), H = cfg.n_head(), KV = cfg.n_kv_head();
  const auto heads = [&](const torch::Tensor& t, int64_t n) { return t.view({B, T, n, D}); };
  const auto q = ops::rotary(heads(nn::linear(q_proj, x), H), cos, sin).transpose(1, 2);   // (B, H, T, D)
  const auto k = ops::rotary(heads(nn::linear(k_proj, x), KV), cos, sin).transpose(1, 2);  // (B, KV, T, D)
  const auto v = heads(nn::linear(v_proj, x), KV).transpose(1, 2);
  if (cache) {  // a prefill: positions [0, T) of every row
    cache->k.narrow(2, 0, T).copy_(k);
    cache->v.narrow(2, 0, T).copy_(v);
  }
  const auto y = ops::attention(q, k, v, is_training() ? cfg.dropout() : 0.0, mask);  // (B, H, T, D)
  return nn::linear(o_proj, y.transpose(1, 2).reshape({B, T, H * D}));
}

LlamaMLPImpl::LlamaMLPImpl(LlamaConfig cfg_) : cfg(std::move(cfg_)) { reset(); }

void LlamaMLPImpl::reset() {
  const int64_t C = cfg.hidden_size(), I = cfg.intermediate_size();
  gate_proj = register_module("gate_proj", make_linear(C, I, false));
  up_proj = register_module("up_proj", make_linear(C, I, false));
  down_proj = register_module("down_proj", make_linear(I, C, false));
}

torch::Tensor LlamaMLPImpl::forward(const torch::Tensor& x) {
  return nn::linear(down_proj, ops::swiglu(nn::linear(gate_proj, x), nn::linear(up_proj, x)));
}

LlamaDecoderLayerImpl::LlamaDecoderLayerImpl(LlamaConfig cfg_) : cfg(std::move(cfg_)) { reset(); }

void LlamaDecoderLayerImpl::reset() {
  self_attn = register_module("self_attn", LlamaAttention(cfg));
  mlp = register_module("mlp", LlamaMLP(cfg));
  input_layernorm = register_module("input_layernorm", RMSNorm(cfg.hidden_size(), cfg.rms_norm_eps()));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RMSNorm(cfg.hidden_size(), cfg.rms_norm_eps()));
}

torch::Tensor LlamaDecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                                             const torch::Tensor& mask, const LayerCache* cache) {
  if (recompute == Recompute::kBlock && !cache)
    return detail::recompute(
        [this, cos, sin, mask](const std::vector<torch::Tensor>& in) {  // by value: backward runs it again
          return std::vector{train_forward(in[0], cos, sin, mask, nullptr)};
        },
        {x})[0];
  return train_forward(x, cos, sin, mask, cache);
}

torch::Tensor LlamaDecoderLayerImpl::train_forward(const torch::Tensor& x, const torch::Tensor& cos,
                                                   const torch::Tensor& sin, const torch::Tensor& mask,
                                                   const LayerCache* cache) {
  const auto [h, normed] = ops::add_rms_norm(x, self_attn->forward(input_layernorm->forward(x), cos, sin, mask, cache),
                                             post_attention_layernorm->weight, post_attention_layernorm->eps);
  if (recompute == Recompute::kMlp && !cache)
    return h +
           detail::recompute([this](const std::vector<torch::Tensor>& in) { return std::vector{mlp->forward(in[0])}; },
                             {normed})[0];
  return h + mlp->forward(normed);
}

std::pair<torch::Tensor, torch::Tensor> LlamaDecoderLayerImpl::decode(const torch::Tensor& x,
                                                                      const torch::Tensor& delta,
                                                                      const torch::Tensor& inv_freq,
                                                                      const LayerCache& cache) {
  const int64_t B = x.size(0), H = cfg.n_head() * cfg.resolved_head_dim();
  const auto& sa = *self_attn;
  const auto& ff = *mlp;
  bool adapted = false;
  for (const auto* l : {&sa.q_proj, &sa.k_proj, &sa.v_proj, &sa.o_proj, &ff.gate_proj, &ff.up_proj, &ff.down_proj})
    adapted = adapted || !plain(**l);
  if (adapted) {  // adapters or stored weights: the products one by one
    const auto [in, a] = ops::add_rms_norm(x, delta, input_layernorm->weight, input_layernorm->eps);
    const auto qkv = torch::cat({nn::linear(sa.q_proj, a), nn::linear(sa.k_proj, a), nn::linear(sa.v_proj, a)}, -1);
    const auto y =
        ops::decode_attention(qkv.view({B, -1}), cache.k, cache.v, cache.positions, cfg.sliding_window(), inv_freq);
    const auto [h, m] = ops::add_rms_norm(in, nn::linear(sa.o_proj, y.view({B, 1, H})),
                                          post_attention_layernorm->weight, post_attention_layernorm->eps);
    return {h, mlp->forward(m)};
  }
  const auto [in, qkv] =
      ops::rms_norm_linear(x, delta, input_layernorm->weight, input_layernorm->eps,
                           {sa.q_proj->weight, sa.k_proj->weight, sa.v_proj->weight},
                           {bias_of(sa.q_proj), bias_of(sa.k_proj), bias_of(sa.v_proj)}, /*swiglu=*/false);
  const auto y =
      ops::decode_attention(qkv.view({B, -1}), cache.k, cache.v, cache.positions, cfg.sliding_window(), inv_freq);
  const auto [h, act] = ops::rms_norm_linear(in, nn::linear(sa.o_proj, y.view({B, 1, H})),
                                             post_attention_layernorm->weight, post_attention_layernorm->eps,
                                             {ff.gate_proj->weight, ff.up_proj->weight}, {}, /*swiglu=*/true);
  return {h, nn::linear(ff.down_proj, act)};
}

LlamaModelImpl::LlamaModelImpl(LlamaConfig cfg_) : cfg(std::move(cfg_)) {
  cfg.validate();
  reset();
}

void LlamaModelImpl::reset() {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(cfg.vocab_size(), cfg.hidden_size()));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t l = 0; l < cfg.n_layer(); ++l) layers->push_back(LlamaDecoderLayer(cfg));
  norm = register_module("norm", RMSNorm(cfg.hidden_size(), cfg.rms_norm_eps()));
}

torch::Tensor LlamaModelImpl::forward(const torch::Tensor& idx, const torch::Tensor& position_ids, KVCache* cache) {
  ids.check(idx, "idx", cfg.vocab_size());
  // On CUDA a bad id is reported later (IdCheck::raise); clamped, it cannot fault the device meanwhile.
  auto x =
      embed_tokens->weight.index_select(0, idx.is_cuda() ? idx.clamp(0, cfg.vocab_size() - 1).flatten() : idx.flatten())
          .view({idx.size(0), idx.size(1), cfg.hidden_size()});
  // Rows that all start at 0 share one row of tables.
  const auto positions = position_ids.defined() ? position_ids : torch::arange(idx.size(1), idx.options()).unsqueeze(0);
  const auto [cos, sin] = ops::rotary_tables(positions, frequencies(idx.device()));  // (B or 1, T, D / 2)
  const auto mask = attention_mask(cfg, idx, position_ids);
  for (size_t l = 0; l < layers->size(); ++l) {
    LayerCache layer;
    if (cache) layer = {cache->k[l], cache->v[l], {}};
    x = layers[l]->as<LlamaDecoderLayerImpl>()->forward(x, cos, sin, mask, cache ? &layer : nullptr);
  }
  return norm->forward(x);
}

std::pair<torch::Tensor, torch::Tensor> LlamaModelImpl::decode_residual(const torch::Tensor& idx,
                                                                        const torch::Tensor& positions,
                                                                        KVCache& cache) {
  const int64_t B = idx.size(0);
  torch::Tensor x = embed_tokens->weight.index_select(0, idx).view({B, 1, cfg.hidden_size()}), delta;  // in range
  const auto& inv = frequencies(idx.device());
  for (size_t l = 0; l < layers->size(); ++l)
    std::tie(x, delta) =
        layers[l]->as<LlamaDecoderLayerImpl>()->decode(x, delta, inv, {cache.k[l], cache.v[l], positions});
  return {x, delta};
}

const torch::Tensor& LlamaModelImpl::frequencies(const torch::Device& device) {
  if (!inv_freq.defined() || inv_freq.device() != device) inv_freq = rope_frequencies(cfg, device);
  return inv_freq;
}

LlamaImpl::LlamaImpl(LlamaConfig cfg_) : cfg(std::move(cfg_)) { reset(); }  // the body validates cfg

void LlamaImpl::reset() {
  model = register_module("model", LlamaModel(cfg));
  if (!cfg.tie_word_embeddings())
    lm_head = register_module("lm_head", make_linear(cfg.hidden_size(), cfg.vocab_size(), false));
  torch::NoGradGuard no_grad;
  for (auto& item : named_parameters()) {
    const std::string& name = item.key();
    torch::Tensor& p = item.value();
    if (name.size() >= 5 && name.compare(name.size() - 5, 5, ".bias") == 0) p.zero_();
    else if (p.dim() == 1) p.fill_(1.0);  // the norms
    else p.normal_(0.0, cfg.initializer_range());
  }
}

void LlamaImpl::set_recompute(Recompute r) {
  LLMTRAIN_CHECK(r == Recompute::kNone || cfg.dropout() == 0, "Llama: recompute (", Choice<Recompute>(r).name(),
                 ") needs attention dropout 0, got ", cfg.dropout(), ": a recomputed part would draw other masks");
  for (const auto& layer : *model->layers) layer->as<LlamaDecoderLayerImpl>()->recompute = r;
}

const torch::Tensor& LlamaImpl::head_weight() const { return lm_head ? lm_head->weight : model->embed_tokens->weight; }

torch::Tensor LlamaImpl::head(const torch::Tensor& h) {
  return lm_head ? nn::linear(lm_head, h) : ops::linear(h, head_weight());
}

torch::Tensor LlamaImpl::checked_hidden(const torch::Tensor& idx, const torch::Tensor& targets,
                                        const torch::Tensor& position_ids) {
  detail::check_batch("Llama", idx, targets, position_ids, cfg.block_size(), cfg.vocab_size(), model->ids);
  return model->forward(idx, position_ids);  // (B, T, C)
}

torch::Tensor LlamaImpl::checked_logits(const torch::Tensor& idx, const torch::Tensor& targets,
                                        const torch::Tensor& position_ids) {
  return head(checked_hidden(idx, targets, position_ids));  // (B, T, V)
}

LlamaOutput LlamaImpl::forward(const torch::Tensor& idx, const torch::Tensor& targets,
                               const torch::Tensor& position_ids) {
  LlamaOutput out;
  out.logits = checked_logits(idx, targets, position_ids);
  if (targets.defined()) out.loss = ops::cross_entropy(out.logits.flatten(0, 1), targets.flatten());
  return out;
}

torch::Tensor LlamaImpl::loss(const torch::Tensor& idx, const torch::Tensor& targets,
                              const torch::Tensor& position_ids) {
  LLMTRAIN_CHECK(targets.defined(), "Llama::loss: targets are required");
  const torch::Tensor& w = head_weight();
  if ((!lm_head || plain(*lm_head)) && !(torch::GradMode::is_enabled() && w.requires_grad()))  // a frozen head
    return ops::linear_cross_entropy(checked_hidden(idx, targets, position_ids).flatten(0, 1), w, targets.flatten());
  return ops::cross_entropy(checked_logits(idx, targets, position_ids).flatten(0, 1), targets.flatten(), kIgnoreIndex,
                            -1, /*overwrite_logits=*/true);
}

torch::Tensor LlamaImpl::logits(const torch::Tensor& idx, const torch::Tensor& position_ids) {
  return checked_logits(idx, {}, position_ids);
}

void LlamaImpl::check_inputs(bool wait) { model->ids.raise(wait); }

KVCache LlamaImpl::make_cache(int64_t batch, int64_t capacity, torch::ScalarType dtype, torch::Device device) const {
  detail::check_cache_size("Llama", capacity, cfg.block_size());
  return KVCache(cfg.n_layer(), batch, cfg.n_kv_head(), capacity, cfg.resolved_head_dim(), dtype, device);
}

torch::Tensor LlamaImpl::prefill(const torch::Tensor& idx, const torch::Tensor& lengths, KVCache& cache) {
  detail::check_prefill("Llama", idx, lengths, cache, cfg.n_layer(), cfg.block_size());
  const int64_t B = idx.size(0), C = cfg.hidden_size();
  torch::NoGradGuard no_grad;
  model->ids.raise(/*wait=*/false);
  const auto h = model->forward(idx, {}, &cache);                                             // (B, T, C)
  const auto last = h.gather(1, (lengths - 1).view({B, 1, 1}).expand({B, 1, C})).squeeze(1);  // (B, C)
  return head(last);
}

torch::Tensor LlamaImpl::decode(const torch::Tensor& idx, const torch::Tensor& positions, KVCache& cache) {
  detail::check_decode("Llama", idx, positions, cache, cfg.n_layer());
  torch::NoGradGuard no_grad;
  const auto [x, delta] = model->decode_residual(idx, positions, cache);
  if (lm_head && !plain(*lm_head))
    return head(ops::add_rms_norm(x, delta, model->norm->weight, model->norm->eps).second).view({idx.size(0), -1});
  // the final norm folded into the head's product
  return ops::rms_norm_linear(x, delta, model->norm->weight, model->norm->eps, {head_weight()}, {}, /*swiglu=*/false)
      .second.view({idx.size(0), cfg.vocab_size()});
}

}  // namespace llmtrain::nn
