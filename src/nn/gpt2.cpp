#include "llmtrain/nn/gpt2.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/nn/functional/linear.h>
#include <torch/nn/init.h>
#include <torch/utils.h>

#include <cmath>
#include <mutex>

#include "llmtrain/core/error.h"
#include "llmtrain/nn/adapter.h"
#include "llmtrain/ops/attention.h"
#include "llmtrain/ops/cross_entropy.h"
#include "llmtrain/ops/dispatch.h"
#include "llmtrain/ops/embedding.h"
#include "llmtrain/ops/gelu.h"
#include "llmtrain/ops/layer_norm.h"
#include "llmtrain/ops/linear.h"
#include "llmtrain/ops/mlp.h"
#include "lm_inputs.h"
#include "recompute.h"

namespace llmtrain::nn {
namespace {

constexpr double kInitStd = 0.02;  // GPT-2's initializer_range

// The weight is drawn by GPT2Transformer::reset, with the model's other weights, in llm.c's order.
torch::nn::Linear make_linear(int64_t in, int64_t out) {
  torch::nn::Linear lin(in, out);
  torch::NoGradGuard no_grad;
  torch::nn::init::zeros_(lin->bias);
  return lin;
}

// Residual projections are scaled down with depth so the residual stream's variance stays flat.
double residual_std(const GPT2Config& cfg) { return kInitStd / std::sqrt(2.0 * cfg.n_layer()); }

torch::nn::LayerNorm make_layer_norm(const GPT2Config& cfg) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({cfg.n_embd()}).eps(cfg.layer_norm_eps()));
}

// {x + delta, ln(x + delta)}: the residual add fused into the norm (delta may be undefined).
std::pair<torch::Tensor, torch::Tensor> add_norm(const torch::nn::LayerNorm& ln, const torch::Tensor& x,
                                                 const torch::Tensor& delta) {
  return ops::add_layer_norm(x, delta, ln->weight, ln->bias, ln->options.eps());
}

torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training) {
  return (p > 0.0 && training) ? torch::dropout(x, p, true) : x;
}

}  // namespace

// ---- CausalSelfAttention ------------------------------------------------------------------------

CausalSelfAttentionImpl::CausalSelfAttentionImpl(GPT2Config cfg_) : cfg(std::move(cfg_)) { reset(); }

void CausalSelfAttentionImpl::reset() {
  c_attn = register_module("c_attn", make_linear(cfg.n_embd(), 3 * cfg.n_embd()));
  c_proj = register_module("c_proj", make_linear(cfg.n_embd(), cfg.n_embd()));
}

torch::Tensor CausalSelfAttentionImpl::forward(const torch::Tensor& x, const LayerCache* cache,
                                               const torch::Tensor& mask) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  const int64_t H = cfg.n_head(), D = cfg.head_dim();
  const auto qkv = nn::linear(c_attn, x);           // (B, T, 3C)
  const auto parts = qkv.split(C, /*dim=*/-1);      // 3 x (B, T, C)
  const auto heads = [&](const torch::Tensor& t) {  // (B, T, C) -> (B, H, T, D)
    return t.view({B, T, H, D}).transpose(1, 2);
  };
  const auto q = heads(parts[0]), k = heads(parts[1]), v = heads(parts[2]);
  if (cache) {  // a prefill: positions [0, T) of every row
    LLMTRAIN_CHECK(!cache->positions.defined(), "CausalSelfAttention: a decode step goes through Block");
    cache->k.narrow(2, 0, T).copy_(k);
    cache->v.narrow(2, 0, T).copy_(v);
  }
  const double p = is_training() ? cfg.dropout() : 0.0;
  const auto y = ops::attention(q, k, v, p, mask).transpose(1, 2).reshape({B, T, C});  // (B, H, T, D) -> (B, T, C)
  return maybe_dropout(nn::linear(c_proj, y), cfg.dropout(), is_training());
}

// ---- MLP ----------------------------------------------------------------------------------------

MLPImpl::MLPImpl(GPT2Config cfg_) : cfg(std::move(cfg_)) { reset(); }

void MLPImpl::reset() {
  c_fc = register_module("c_fc", make_linear(cfg.n_embd(), 4 * cfg.n_embd()));
  c_proj = register_module("c_proj", make_linear(4 * cfg.n_embd(), cfg.n_embd()));
}

torch::Tensor MLPImpl::forward(const torch::Tensor& x) {
  const auto y = plain(*c_fc) && plain(*c_proj) ? ops::mlp(x, c_fc->weight, c_fc->bias, c_proj->weight, c_proj->bias)
                                                : nn::linear(c_proj, ops::gelu(nn::linear(c_fc, x)));
  return maybe_dropout(y, cfg.dropout(), is_training());
}

// ---- Block --------------------------------------------------------------------------------------

BlockImpl::BlockImpl(GPT2Config cfg_) : cfg(std::move(cfg_)) { reset(); }

void BlockImpl::reset() {
  ln_1 = register_module("ln_1", make_layer_norm(cfg));
  attn = register_module("attn", CausalSelfAttention(cfg));
  ln_2 = register_module("ln_2", make_layer_norm(cfg));
  mlp = register_module("mlp", MLP(cfg));
}

torch::Tensor BlockImpl::forward(const torch::Tensor& x) {
  const auto [h, delta] = forward_residual(x, {});
  return h + delta;
}

std::pair<torch::Tensor, torch::Tensor> BlockImpl::forward_residual(const torch::Tensor& x, const torch::Tensor& delta,
                                                                    const LayerCache* cache,
                                                                    const torch::Tensor& mask) {
  if (cache && cache->positions.defined()) return decode_residual(x, delta, *cache);
  if (recompute == Recompute::kBlock && !cache) {
    const auto out = detail::recompute(
        [this, mask](const std::vector<torch::Tensor>& in) {
          const auto [h, d] = train_residual(in[0], in[1], nullptr, mask);
          return std::vector<torch::Tensor>{h, d};
        },
        {x, delta});
    return {out[0], out[1]};
  }
  return train_residual(x, delta, cache, mask);
}

std::pair<torch::Tensor, torch::Tensor> BlockImpl::train_residual(const torch::Tensor& x, const torch::Tensor& delta,
                                                                  const LayerCache* cache, const torch::Tensor& mask) {
  const auto [in, a] = add_norm(ln_1, x, delta);  // in = x + delta, a = ln_1(in)
  const auto [h, m] = add_norm(ln_2, in, attn->forward(a, cache, mask));
  if (recompute == Recompute::kMlp && !cache)
    return {
        h, detail::recompute([this](const std::vector<torch::Tensor>& in) { return std::vector{mlp(in[0])}; }, {m})[0]};
  return {h, mlp(m)};
}

// A decode step: each norm folded into the product after it (ops::norm_linear), five launches a layer
// on CUDA at small batches.
std::pair<torch::Tensor, torch::Tensor> BlockImpl::decode_residual(const torch::Tensor& x, const torch::Tensor& delta,
                                                                   const LayerCache& cache) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2);
  LLMTRAIN_CHECK(T == 1, "Block: a decode step takes one token per row, got ", T);
  const auto& sa = *attn;
  const auto& ff = *mlp;
  if (!plain(*sa.c_attn) || !plain(*sa.c_proj) || !plain(*ff.c_fc) || !plain(*ff.c_proj)) {
    const auto [in, a] = add_norm(ln_1, x, delta);  // adapters or stored weights: the products one by one
    const auto y = ops::decode_attention(nn::linear(sa.c_attn, a).view({B, 3 * C}), cache.k, cache.v, cache.positions);
    const auto [h, m] = add_norm(ln_2, in, nn::linear(sa.c_proj, y.view({B, 1, C})));
    return {h, mlp->forward(m)};
  }
  const auto [in, qkv] = ops::norm_linear(x, delta, ln_1->weight, ln_1->bias, ln_1->options.eps(), sa.c_attn->weight,
                                          sa.c_attn->bias, /*gelu=*/false);
  const auto y = ops::decode_attention(qkv.view({B, 3 * C}), cache.k, cache.v, cache.positions).view({B, 1, C});
  const auto [h, f] = ops::norm_linear(in, ops::linear(y, sa.c_proj->weight, sa.c_proj->bias), ln_2->weight, ln_2->bias,
                                       ln_2->options.eps(), ff.c_fc->weight, ff.c_fc->bias, /*gelu=*/true);
  return {h, ops::linear(f, ff.c_proj->weight, ff.c_proj->bias)};
}

// ---- GPT2Transformer ----------------------------------------------------------------------------

GPT2TransformerImpl::GPT2TransformerImpl(GPT2Config cfg_) : cfg(std::move(cfg_)) {
  cfg.validate();
  reset();
}

void GPT2TransformerImpl::reset() {
  // The weights are drawn once every module exists, from the CPU generator as it stood before the
  // modules' constructors drew from it, in the order and sizes of llm.c's gpt2_build_from_random
  // (wte's first vocab_size rows, wpe, then each layer's c_attn, attn.c_proj, c_fc, mlp.c_proj):
  // after torch::manual_seed(s) the model starts from the weights llm.c starts from with seed s.
  at::Generator draws;
  {
    auto global = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(global.mutex());
    draws = global.clone();
  }
  wte = register_module("wte", torch::nn::Embedding(cfg.padded_vocab_size(), cfg.n_embd()));
  wpe = register_module("wpe", torch::nn::Embedding(cfg.block_size(), cfg.n_embd()));
  h = register_module("h", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.n_layer(); ++i) h->push_back(Block(cfg));
  ln_f = register_module("ln_f", make_layer_norm(cfg));

  torch::NoGradGuard no_grad;
  const auto normal = [&](const torch::Tensor& w, double stddev) { w.normal_(0.0, stddev, draws); };
  normal(wte->weight.narrow(0, 0, cfg.vocab_size()), kInitStd);
  wte->weight.narrow(0, cfg.vocab_size(), cfg.padded_vocab_size() - cfg.vocab_size()).zero_();
  normal(wpe->weight, kInitStd);
  for (const auto& module : *h) {
    const auto& block = *module->as<BlockImpl>();
    normal(block.attn->c_attn->weight, kInitStd);
    normal(block.attn->c_proj->weight, residual_std(cfg));
    normal(block.mlp->c_fc->weight, kInitStd);
    normal(block.mlp->c_proj->weight, residual_std(cfg));
  }
}

torch::Tensor GPT2TransformerImpl::forward(const torch::Tensor& idx, KVCache* cache, const torch::Tensor& positions,
                                           const torch::Tensor& position_ids) {
  const auto [x, delta] = forward_residual(idx, cache, positions, position_ids);
  return add_norm(ln_f, x, delta).second;
}

std::pair<torch::Tensor, torch::Tensor> GPT2TransformerImpl::forward_residual(const torch::Tensor& idx, KVCache* cache,
                                                                              const torch::Tensor& positions,
                                                                              const torch::Tensor& position_ids) {
  LLMTRAIN_CHECK(!position_ids.defined() || (!cache && !positions.defined()),
                 "GPT2Transformer: position_ids (packed documents) are for training and scoring, not with a KV cache");
  const torch::Tensor& at = position_ids.defined() ? position_ids : positions;
  torch::Tensor x = ops::embedding(idx, wte->weight, wpe->weight, cfg.vocab_size(), ids, at);  // (B, T, C)
  // One mask for every layer: packed documents attend only within themselves.
  const torch::Tensor mask = position_ids.defined() ? ops::document_mask(position_ids) : torch::Tensor();
  x = maybe_dropout(x, cfg.dropout(), is_training());
  // Each block's last residual add is left pending and fused with the next layer norm.
  torch::Tensor delta;
  for (size_t i = 0; i < h->size(); ++i) {
    LayerCache layer;
    if (cache) layer = {cache->k[i], cache->v[i], positions};
    std::tie(x, delta) = h[i]->as<BlockImpl>()->forward_residual(x, delta, cache ? &layer : nullptr, mask);
  }
  return {x, delta};
}

// ---- GPT2 ---------------------------------------------------------------------------------------

GPT2Impl::GPT2Impl(GPT2Config cfg_) : cfg(std::move(cfg_)) { reset(); }  // the body validates cfg

void GPT2Impl::reset() { transformer = register_module("transformer", GPT2Transformer(cfg)); }

void GPT2Impl::set_recompute(Recompute r) {
  LLMTRAIN_CHECK(r == Recompute::kNone || cfg.dropout() == 0, "GPT2: recompute (", Choice<Recompute>(r).name(),
                 ") needs dropout 0, got ", cfg.dropout(), ": a recomputed part would draw other dropout masks");
  for (const auto& block : *transformer->h) block->as<BlockImpl>()->recompute = r;
}

torch::Tensor GPT2Impl::checked_hidden(const torch::Tensor& idx, const torch::Tensor& targets,
                                       const torch::Tensor& position_ids) {
  detail::check_batch("GPT2", idx, targets, position_ids, cfg.block_size(), cfg.vocab_size(), transformer->ids);
  return transformer->forward(idx, nullptr, {}, position_ids);  // (B, T, C)
}

torch::Tensor GPT2Impl::padded_logits(const torch::Tensor& idx, const torch::Tensor& targets,
                                      const torch::Tensor& position_ids) {
  return torch::nn::functional::linear(checked_hidden(idx, targets, position_ids),
                                       transformer->wte->weight);  // (B, T, padded V)
}

GPT2Output GPT2Impl::forward(const torch::Tensor& idx, const torch::Tensor& targets,
                             const torch::Tensor& position_ids) {
  const torch::Tensor padded = padded_logits(idx, targets, position_ids);
  GPT2Output out;
  out.logits = padded.narrow(-1, 0, cfg.vocab_size());  // (B, T, V)
  // The loss reads the padded rows (padding columns excluded), so its gradient is the padded shape and
  // no zero-filled copy is made on the way back.
  if (targets.defined())
    out.loss = ops::cross_entropy(padded.flatten(0, 1), targets.flatten(), kIgnoreIndex, cfg.vocab_size());
  return out;
}

torch::Tensor GPT2Impl::loss(const torch::Tensor& idx, const torch::Tensor& targets,
                             const torch::Tensor& position_ids) {
  LLMTRAIN_CHECK(targets.defined(), "GPT2::loss: targets are required");
  const torch::Tensor& w = transformer->wte->weight;
  if (!(torch::GradMode::is_enabled() && w.requires_grad()))  // a frozen head: no (B, T, padded V) logits
    return ops::linear_cross_entropy(checked_hidden(idx, targets, position_ids).flatten(0, 1), w, targets.flatten(),
                                     kIgnoreIndex, cfg.vocab_size());
  const torch::Tensor padded = padded_logits(idx, targets, position_ids);
  return ops::cross_entropy(padded.flatten(0, 1), targets.flatten(), kIgnoreIndex, cfg.vocab_size(),
                            /*overwrite_logits=*/true);
}

torch::Tensor GPT2Impl::logits(const torch::Tensor& idx, const torch::Tensor& position_ids) {
  return forward(idx, {}, position_ids).logits;
}

void GPT2Impl::check_inputs(bool wait) { transformer->ids.raise(wait); }

KVCache GPT2Impl::make_cache(int64_t batch, int64_t capacity, torch::ScalarType dtype, torch::Device device) const {
  detail::check_cache_size("GPT2", capacity, cfg.block_size());
  return KVCache(cfg.n_layer(), batch, cfg.n_head(), capacity, cfg.head_dim(), dtype, device);
}

torch::Tensor GPT2Impl::prefill(const torch::Tensor& idx, const torch::Tensor& lengths, KVCache& cache) {
  detail::check_prefill("GPT2", idx, lengths, cache, cfg.n_layer(), cfg.block_size());
  const int64_t B = idx.size(0), C = cfg.n_embd();
  torch::NoGradGuard no_grad;
  transformer->ids.raise(/*wait=*/false);
  const torch::Tensor x = transformer(idx, &cache);                                                    // (B, T, C)
  const torch::Tensor last = x.gather(1, (lengths - 1).view({B, 1, 1}).expand({B, 1, C})).squeeze(1);  // (B, C)
  return torch::nn::functional::linear(last, transformer->wte->weight).narrow(-1, 0, cfg.vocab_size());
}

torch::Tensor GPT2Impl::decode(const torch::Tensor& idx, const torch::Tensor& positions, KVCache& cache) {
  detail::check_decode("GPT2", idx, positions, cache, cfg.n_layer());
  const int64_t B = idx.size(0);
  torch::NoGradGuard no_grad;
  const auto [x, delta] = transformer->forward_residual(idx.view({B, 1}), &cache, positions);  // (B, 1, C) each
  const auto& ln = transformer->ln_f;
  const auto logits =
      ops::norm_linear(x, delta, ln->weight, ln->bias, ln->options.eps(), transformer->wte->weight, {}, /*gelu=*/false)
          .second;  // (B, 1, padded V)
  return logits.view({B, -1}).narrow(-1, 0, cfg.vocab_size());
}

}  // namespace llmtrain::nn
