#include "ember/model/tensor_names.h"

#include <cctype>
#include <map>
#include <utility>

namespace ember {

namespace {

const std::map<std::string, std::string>& gguf_top_level() {
  static const std::map<std::string, std::string> kTopLevel = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output.weight", "lm_head.weight"},
  };
  return kTopLevel;
}

// GGUF suffix after "blk.N." -> HF suffix after "model.layers.N.".
const std::map<std::string, std::string>& gguf_per_layer() {
  static const std::map<std::string, std::string> kPerLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
  };
  return kPerLayer;
}

// "<prefix><digits>.<rest>" -> (digits, rest); nullopt when the name does not look like that.
std::optional<std::pair<std::string, std::string>> split_layer(const std::string& name,
                                                               const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  const size_t start = prefix.size();
  const size_t dot = name.find('.', start);
  if (dot == std::string::npos || dot == start) return std::nullopt;
  std::string layer = name.substr(start, dot - start);
  for (char c : layer) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  return std::make_pair(layer, name.substr(dot + 1));
}

}  // namespace

std::optional<std::string> hf_name_from_gguf(const std::string& gguf_name) {
  const auto& kTopLevel = gguf_top_level();
  const auto& kPerLayer = gguf_per_layer();
  if (auto it = kTopLevel.find(gguf_name); it != kTopLevel.end()) return it->second;
  const auto parts = split_layer(gguf_name, "blk.");
  if (!parts) return std::nullopt;
  auto it = kPerLayer.find(parts->second);
  if (it == kPerLayer.end()) return std::nullopt;
  return "model.layers." + parts->first + "." + it->second;
}

std::optional<std::string> gguf_name_from_hf(const std::string& hf_name) {
  for (const auto& [gguf, hf] : gguf_top_level()) {
    if (hf == hf_name) return gguf;
  }
  const auto parts = split_layer(hf_name, "model.layers.");
  if (!parts) return std::nullopt;
  for (const auto& [gguf, hf] : gguf_per_layer()) {
    if (hf == parts->second) return "blk." + parts->first + "." + gguf;
  }
  return std::nullopt;
}

const char* component_name(TensorComponent component) {
  switch (component) {
    case TensorComponent::Embedding:
      return "embeddings";
    case TensorComponent::Attention:
      return "attention";
    case TensorComponent::Mlp:
      return "mlp";
    case TensorComponent::Norm:
      return "norms";
    case TensorComponent::LmHead:
      return "lm_head";
    case TensorComponent::Other:
      return "other";
  }
  return "other";
}

TensorComponent classify_tensor(const std::string& raw_name) {
  std::string name = hf_name_from_gguf(raw_name).value_or(raw_name);
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("embed_tokens")) return TensorComponent::Embedding;
  if (name == "lm_head.weight") return TensorComponent::LmHead;
  if (has("layernorm") || has("model.norm")) return TensorComponent::Norm;
  if (has("self_attn.")) return TensorComponent::Attention;
  if (has("mlp.")) return TensorComponent::Mlp;
  return TensorComponent::Other;
}

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, c.d_model}, true});
  for (int64_t l = 0; l < c.n_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    out.push_back({p + "input_layernorm.weight", {c.d_model}, false});
    out.push_back({p + "self_attn.q_proj.weight", {c.q_dim(), c.d_model}, true});
    out.push_back({p + "self_attn.k_proj.weight", {c.kv_dim(), c.d_model}, true});
    out.push_back({p + "self_attn.v_proj.weight", {c.kv_dim(), c.d_model}, true});
    if (c.attention_bias) {
      out.push_back({p + "self_attn.q_proj.bias", {c.q_dim()}, false});
      out.push_back({p + "self_attn.k_proj.bias", {c.kv_dim()}, false});
      out.push_back({p + "self_attn.v_proj.bias", {c.kv_dim()}, false});
    }
    out.push_back({p + "self_attn.o_proj.weight", {c.d_model, c.q_dim()}, true});
    out.push_back({p + "post_attention_layernorm.weight", {c.d_model}, false});
    out.push_back({p + "mlp.gate_proj.weight", {c.d_ffn, c.d_model}, true});
    out.push_back({p + "mlp.up_proj.weight", {c.d_ffn, c.d_model}, true});
    out.push_back({p + "mlp.down_proj.weight", {c.d_model, c.d_ffn}, true});
  }
  out.push_back({"model.norm.weight", {c.d_model}, false});
  if (!c.tie_word_embeddings) out.push_back({"lm_head.weight", {c.vocab_size, c.d_model}, true});
  return out;
}

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    bool da = std::isdigit(static_cast<unsigned char>(a[i])) != 0;
    bool db = std::isdigit(static_cast<unsigned char>(b[j])) != 0;
    if (da && db) {
      size_t ei = i, ej = j;
      while (ei < a.size() && std::isdigit(static_cast<unsigned char>(a[ei]))) ++ei;
      while (ej < b.size() && std::isdigit(static_cast<unsigned char>(b[ej]))) ++ej;
      std::string na = a.substr(i, ei - i), nb = b.substr(j, ej - j);
      na.erase(0, std::min(na.find_first_not_of('0'), na.size()));
      nb.erase(0, std::min(nb.find_first_not_of('0'), nb.size()));
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ei;
      j = ej;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

}  // namespace ember
