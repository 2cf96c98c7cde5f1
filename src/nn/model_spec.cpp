#include "llmtrain/nn/model_spec.h"

#include <algorithm>
#include <sstream>

#include "llmtrain/core/error.h"

namespace llmtrain::nn {
namespace {

// Every field of a Llama shape that makes its tensors or its function, in describe()'s words.
std::string llama_fields(const LlamaConfig& c) {
  std::ostringstream s;
  s << "vocab_size " << c.vocab_size() << ", hidden_size " << c.hidden_size() << ", intermediate_size "
    << c.intermediate_size() << ", n_layer " << c.n_layer() << ", n_head " << c.n_head() << ", n_kv_head "
    << c.n_kv_head() << ", head_dim " << c.resolved_head_dim() << ", block_size " << c.block_size() << ", rms_norm_eps "
    << c.rms_norm_eps() << ", rope_theta " << c.rope_theta() << ", rope_scaling " << c.rope_scaling();
  if (c.rope_scaling() != RopeScaling::kNone) s << " x" << c.rope_factor();
  if (c.rope_scaling() == RopeScaling::kLlama3)
    s << " (low " << c.rope_low_freq_factor() << ", high " << c.rope_high_freq_factor() << ", original "
      << c.rope_original_max_positions() << ")";
  s << ", qkv_bias " << c.qkv_bias() << ", o_bias " << c.o_bias() << ", tied head " << c.tie_word_embeddings()
    << ", sliding_window " << c.sliding_window();
  return s.str();
}

std::string gpt2_fields(const GPT2Config& c) {
  std::ostringstream s;
  s << "vocab_size " << c.vocab_size() << ", block_size " << c.block_size() << ", n_layer " << c.n_layer()
    << ", n_head " << c.n_head() << ", n_embd " << c.n_embd() << ", layer_norm_eps " << c.layer_norm_eps();
  return s.str();
}

}  // namespace

ModelSpec ModelSpec::preset(const std::string& name) {
  const auto gpt2 = GPT2Config::preset_names();
  if (std::find(gpt2.begin(), gpt2.end(), name) != gpt2.end()) return GPT2Config::preset(name);
  const auto llama = LlamaConfig::preset_names();
  if (std::find(llama.begin(), llama.end(), name) != llama.end()) return LlamaConfig::preset(name);
  std::string names;
  for (const auto& n : preset_names()) names += (names.empty() ? "" : ", ") + n;
  LLMTRAIN_CHECK(false, "unknown preset \"", name, "\"; expected one of ", names);
  return GPT2Config();
}

std::vector<std::string> ModelSpec::preset_names() {
  auto names = GPT2Config::preset_names();
  for (auto& n : LlamaConfig::preset_names()) names.push_back(n);
  return names;
}

const GPT2Config& ModelSpec::gpt2() const {
  LLMTRAIN_CHECK(is_gpt2(), "this is a ", family(), " model, not GPT-2");
  return std::get<GPT2Config>(c_);
}
const LlamaConfig& ModelSpec::llama() const {
  LLMTRAIN_CHECK(!is_gpt2(), "this is a GPT-2 model, not of the Llama family");
  return std::get<LlamaConfig>(c_);
}
GPT2Config& ModelSpec::gpt2() { return const_cast<GPT2Config&>(std::as_const(*this).gpt2()); }
LlamaConfig& ModelSpec::llama() { return const_cast<LlamaConfig&>(std::as_const(*this).llama()); }

std::string ModelSpec::family() const { return is_gpt2() ? "gpt2" : std::string(llama().family().name()); }

int64_t ModelSpec::vocab_size() const { return is_gpt2() ? gpt2().vocab_size() : llama().vocab_size(); }
int64_t ModelSpec::block_size() const { return is_gpt2() ? gpt2().block_size() : llama().block_size(); }
int64_t ModelSpec::logits_width() const { return is_gpt2() ? gpt2().padded_vocab_size() : llama().vocab_size(); }
int64_t ModelSpec::stored_parameters() const {
  return is_gpt2() ? gpt2().stored_parameters() : llama().num_parameters();
}

double ModelSpec::flops_per_token(int64_t seq_len) const {
  return is_gpt2() ? gpt2().flops_per_token(seq_len) : llama().flops_per_token(seq_len);
}

void ModelSpec::validate() const {
  if (is_gpt2()) gpt2().validate();
  else llama().validate();
}

bool ModelSpec::same_shape(const ModelSpec& other) const {
  return is_gpt2() == other.is_gpt2() && describe() == other.describe();
}

std::string ModelSpec::summary() const {
  std::ostringstream s;
  if (is_gpt2()) {
    s << "GPT-2, " << gpt2().n_layer() << " layers x " << gpt2().n_embd() << " wide";
  } else {
    const LlamaConfig& c = llama();
    static const char* names[] = {"Llama", "Mistral", "Qwen2"};
    s << names[int(c.family().value())] << ", " << c.n_layer() << " layers x " << c.hidden_size() << " wide, "
      << c.n_head() << " heads over " << c.n_kv_head() << " key/value heads";
  }
  return s.str();
}

std::string ModelSpec::describe() const {
  return family() + ": " + (is_gpt2() ? gpt2_fields(gpt2()) : llama_fields(llama()));
}

}  // namespace llmtrain::nn
