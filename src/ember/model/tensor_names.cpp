#include "ember/model/tensor_names.h"

#include <cctype>
#include <map>
#include <utility>

namespace ember {

namespace {

using NamePairs = std::vector<std::pair<std::string, std::string>>;  // (stored, canonical)

// GGUF top-level names -> canonical names.
const NamePairs& gguf_top_level() {
  static const NamePairs kTopLevel = {
      {"token_embd.weight", "model.embed_tokens.weight"},
      {"position_embd.weight", "model.embed_positions.weight"},
      {"output_norm.weight", "model.norm.weight"},
      {"output_norm.bias", "model.norm.bias"},
      {"output.weight", "lm_head.weight"},
  };
  return kTopLevel;
}

// GGUF suffix after "blk.N." -> canonical suffix after "model.layers.N.". llama.cpp uses one set
// of names for every architecture; only Phi-3's ffn_up (gate and up fused) means something else.
const NamePairs& gguf_per_layer(const std::string& arch) {
  static const NamePairs kPerLayer = {
      {"attn_norm.weight", "input_layernorm.weight"},
      {"attn_norm.bias", "input_layernorm.bias"},
      {"attn_q.weight", "self_attn.q_proj.weight"},
      {"attn_k.weight", "self_attn.k_proj.weight"},
      {"attn_v.weight", "self_attn.v_proj.weight"},
      {"attn_q.bias", "self_attn.q_proj.bias"},
      {"attn_k.bias", "self_attn.k_proj.bias"},
      {"attn_v.bias", "self_attn.v_proj.bias"},
      {"attn_qkv.weight", "self_attn.qkv_proj.weight"},
      {"attn_qkv.bias", "self_attn.qkv_proj.bias"},
      {"attn_q_norm.weight", "self_attn.q_norm.weight"},
      {"attn_k_norm.weight", "self_attn.k_norm.weight"},
      {"attn_output.weight", "self_attn.o_proj.weight"},
      {"attn_output.bias", "self_attn.o_proj.bias"},
      {"post_attention_norm.weight", "self_attn.output_norm.weight"},
      {"ffn_norm.weight", "post_attention_layernorm.weight"},
      {"ffn_norm.bias", "post_attention_layernorm.bias"},
      {"ffn_gate.weight", "mlp.gate_proj.weight"},
      {"ffn_up.weight", "mlp.up_proj.weight"},
      {"ffn_up.bias", "mlp.up_proj.bias"},
      {"ffn_down.weight", "mlp.down_proj.weight"},
      {"ffn_down.bias", "mlp.down_proj.bias"},
      {"post_ffw_norm.weight", "mlp.output_norm.weight"},
      // Mixtures of experts: the router, the experts stacked in one 3-D tensor per projection
      // ([n_expert, rows, cols]), and Qwen2-MoE's shared expert with its gate.
      {"ffn_gate_inp.weight", "mlp.gate.weight"},
      {"ffn_gate_exps.weight", "mlp.experts.gate_proj.weight"},
      {"ffn_up_exps.weight", "mlp.experts.up_proj.weight"},
      {"ffn_down_exps.weight", "mlp.experts.down_proj.weight"},
      {"ffn_gate_shexp.weight", "mlp.shared_expert.gate_proj.weight"},
      {"ffn_up_shexp.weight", "mlp.shared_expert.up_proj.weight"},
      {"ffn_down_shexp.weight", "mlp.shared_expert.down_proj.weight"},
      {"ffn_gate_inp_shexp.weight", "mlp.shared_expert_gate.weight"},
  };
  static const NamePairs kPhi3 = [] {
    NamePairs p = kPerLayer;
    for (auto& [gguf, canonical] : p) {
      if (gguf == "ffn_up.weight") canonical = "mlp.gate_up_proj.weight";
    }
    return p;
  }();
  return arch == "phi3" ? kPhi3 : kPerLayer;
}

// HF names that differ from the canonical ones, per family. Gemma's "post_attention_layernorm"
// normalises the attention output (canonical self_attn.output_norm), while Llama's is the norm
// before the MLP (Gemma's pre_feedforward_layernorm).
const NamePairs& hf_per_layer(const std::string& arch) {
  static const NamePairs kNone;
  static const NamePairs kGemma = {
      {"post_attention_layernorm.weight", "self_attn.output_norm.weight"},
      {"pre_feedforward_layernorm.weight", "post_attention_layernorm.weight"},
      {"post_feedforward_layernorm.weight", "mlp.output_norm.weight"},
  };
  static const NamePairs kGpt2 = {
      {"ln_1.weight", "input_layernorm.weight"},
      {"ln_1.bias", "input_layernorm.bias"},
      {"attn.c_attn.weight", "self_attn.qkv_proj.weight"},
      {"attn.c_attn.bias", "self_attn.qkv_proj.bias"},
      {"attn.c_proj.weight", "self_attn.o_proj.weight"},
      {"attn.c_proj.bias", "self_attn.o_proj.bias"},
      {"ln_2.weight", "post_attention_layernorm.weight"},
      {"ln_2.bias", "post_attention_layernorm.bias"},
      {"mlp.c_fc.weight", "mlp.up_proj.weight"},
      {"mlp.c_fc.bias", "mlp.up_proj.bias"},
      {"mlp.c_proj.weight", "mlp.down_proj.weight"},
      {"mlp.c_proj.bias", "mlp.down_proj.bias"},
  };
  if (arch == "gemma2" || arch == "gemma3") return kGemma;
  if (arch == "gpt2") return kGpt2;
  return kNone;
}

const NamePairs& hf_top_level(const std::string& arch) {
  static const NamePairs kNone;
  static const NamePairs kGpt2 = {
      {"wte.weight", "model.embed_tokens.weight"},
      {"wpe.weight", "model.embed_positions.weight"},
      {"ln_f.weight", "model.norm.weight"},
      {"ln_f.bias", "model.norm.bias"},
  };
  return arch == "gpt2" ? kGpt2 : kNone;
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

std::optional<std::string> lookup(const NamePairs& pairs, const std::string& key, bool forward) {
  for (const auto& [stored, canonical] : pairs) {
    if ((forward ? stored : canonical) == key) return forward ? canonical : stored;
  }
  return std::nullopt;
}

}  // namespace

std::optional<std::string> hf_name_from_gguf(const std::string& gguf_name,
                                             const std::string& arch) {
  if (auto top = lookup(gguf_top_level(), gguf_name, true)) return top;
  const auto parts = split_layer(gguf_name, "blk.");
  if (!parts) return std::nullopt;
  auto suffix = lookup(gguf_per_layer(arch), parts->second, true);
  if (!suffix) return std::nullopt;
  return "model.layers." + parts->first + "." + *suffix;
}

std::optional<std::string> gguf_name_from_hf(const std::string& hf_name, const std::string& arch) {
  if (auto top = lookup(gguf_top_level(), hf_name, false)) return top;
  const auto parts = split_layer(hf_name, "model.layers.");
  if (!parts) return std::nullopt;
  auto suffix = lookup(gguf_per_layer(arch), parts->second, false);
  if (!suffix) return std::nullopt;
  return "blk." + parts->first + "." + *suffix;
}

std::string canonical_from_hf(const std::string& hf_name, const std::string& arch) {
  std::string name = hf_name;
  if (arch == "gpt2") {
    if (name.rfind("transformer.", 0) == 0) name = name.substr(12);
    if (auto top = lookup(hf_top_level(arch), name, true)) return *top;
    if (const auto parts = split_layer(name, "h.")) {
      if (auto suffix = lookup(hf_per_layer(arch), parts->second, true)) {
        return "model.layers." + parts->first + "." + *suffix;
      }
    }
    return name;
  }
  if (const auto parts = split_layer(name, "model.layers.")) {
    if (auto suffix = lookup(hf_per_layer(arch), parts->second, true)) {
      return "model.layers." + parts->first + "." + *suffix;
    }
    // Mixtral's MoE block: block_sparse_moe.gate (the router) and experts.E.w1/w3/w2 (gate, up,
    // down) are the mlp.gate / mlp.experts.E.*_proj names the other mixtures use.
    const std::string& rest = parts->second;
    if (rest.rfind("block_sparse_moe.", 0) == 0) {
      std::string canonical = "mlp." + rest.substr(17);
      for (const auto& [w, proj] : {std::pair<const char*, const char*>{".w1.", ".gate_proj."},
                                    {".w3.", ".up_proj."},
                                    {".w2.", ".down_proj."}}) {
        if (const size_t at = canonical.find(w); at != std::string::npos) {
          canonical.replace(at, 4, proj);
        }
      }
      return "model.layers." + parts->first + "." + canonical;
    }
  }
  return name;
}

std::string hf_from_canonical(const std::string& canonical, const std::string& arch) {
  if (auto top = lookup(hf_top_level(arch), canonical, false)) return *top;
  if (const auto parts = split_layer(canonical, "model.layers.")) {
    if (auto suffix = lookup(hf_per_layer(arch), parts->second, false)) {
      return (arch == "gpt2" ? "h." : "model.layers.") + parts->first + "." + *suffix;
    }
  }
  return canonical;
}

bool hf_weight_is_transposed(const std::string& hf_name, const std::string& arch) {
  // GPT-2's Conv1D layers store [in, out]; its embeddings and norms are ordinary.
  if (arch != "gpt2") return false;
  return hf_name.ends_with("attn.c_attn.weight") || hf_name.ends_with("attn.c_proj.weight") ||
         hf_name.ends_with("mlp.c_fc.weight") || hf_name.ends_with("mlp.c_proj.weight");
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
  std::string name = hf_name_from_gguf(raw_name, "llama").value_or(raw_name);
  auto has = [&](const char* s) { return name.find(s) != std::string::npos; };
  if (has("embed_tokens") || has("embed_positions") || has("wte.") || has("wpe.")) {
    return TensorComponent::Embedding;
  }
  if (name == "lm_head.weight") return TensorComponent::LmHead;
  if (has("layernorm") || has("model.norm") || has("_norm.") || has("ln_")) {
    return TensorComponent::Norm;
  }
  if (has("self_attn.") || has("attn.")) return TensorComponent::Attention;
  if (has("mlp.")) return TensorComponent::Mlp;
  return TensorComponent::Other;
}

namespace {

// A mixture-of-experts MLP: the router [E, D], each projection's experts as one [E, rows, cols]
// tensor, and the shared expert (a SwiGLU MLP) with its gate [1, D] where the config has one.
void add_expert_tensors(const ModelConfig& c, const std::string& p,
                        std::vector<ExpectedTensor>& out) {
  const int64_t E = c.n_experts, F = c.d_expert_ffn, D = c.d_model;
  out.push_back({p + "mlp.gate.weight", {E, D}, true});
  out.push_back({p + "mlp.experts.gate_proj.weight", {E, F, D}, true});
  out.push_back({p + "mlp.experts.up_proj.weight", {E, F, D}, true});
  out.push_back({p + "mlp.experts.down_proj.weight", {E, D, F}, true});
  if (c.d_shared_expert_ffn > 0) {
    const int64_t S = c.d_shared_expert_ffn;
    out.push_back({p + "mlp.shared_expert.gate_proj.weight", {S, D}, true});
    out.push_back({p + "mlp.shared_expert.up_proj.weight", {S, D}, true});
    out.push_back({p + "mlp.shared_expert.down_proj.weight", {D, S}, true});
    out.push_back({p + "mlp.shared_expert_gate.weight", {1, D}, true});
  }
}

}  // namespace

std::vector<ExpectedTensor> expected_tensors(const ModelConfig& c) {
  std::vector<ExpectedTensor> out;
  const bool layer_norm = c.norm == NormKind::Layer;
  auto norm = [&](const std::string& name) {
    out.push_back({name + ".weight", {c.d_model}, false});
    if (layer_norm) out.push_back({name + ".bias", {c.d_model}, false});
  };
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, c.d_model}, true});
  if (c.learned_positions) {
    out.push_back({"model.embed_positions.weight", {c.max_position_embeddings, c.d_model}, true});
  }
  for (int64_t l = 0; l < c.n_layers; ++l) {
    std::string p = "model.layers." + std::to_string(l) + ".";
    norm(p + "input_layernorm");
    if (c.fused_qkv) {
      const int64_t rows = c.q_dim() + 2 * c.kv_dim();
      out.push_back({p + "self_attn.qkv_proj.weight", {rows, c.d_model}, true});
      if (c.attention_bias) out.push_back({p + "self_attn.qkv_proj.bias", {rows}, false});
    } else {
      out.push_back({p + "self_attn.q_proj.weight", {c.q_dim(), c.d_model}, true});
      out.push_back({p + "self_attn.k_proj.weight", {c.kv_dim(), c.d_model}, true});
      out.push_back({p + "self_attn.v_proj.weight", {c.kv_dim(), c.d_model}, true});
      if (c.attention_bias) {
        out.push_back({p + "self_attn.q_proj.bias", {c.q_dim()}, false});
        out.push_back({p + "self_attn.k_proj.bias", {c.kv_dim()}, false});
        out.push_back({p + "self_attn.v_proj.bias", {c.kv_dim()}, false});
      }
    }
    if (c.qk_norm_whole) {
      out.push_back({p + "self_attn.q_norm.weight", {c.q_dim()}, false});
      out.push_back({p + "self_attn.k_norm.weight", {c.kv_dim()}, false});
    } else if (c.qk_norm) {
      out.push_back({p + "self_attn.q_norm.weight", {c.head_dim}, false});
      out.push_back({p + "self_attn.k_norm.weight", {c.head_dim}, false});
    }
    out.push_back({p + "self_attn.o_proj.weight", {c.d_model, c.q_dim()}, true});
    if (c.linear_biases) out.push_back({p + "self_attn.o_proj.bias", {c.d_model}, false});
    if (c.sandwich_norms) out.push_back({p + "self_attn.output_norm.weight", {c.d_model}, false});
    norm(p + "post_attention_layernorm");
    if (c.is_moe()) {
      add_expert_tensors(c, p, out);
    } else if (c.fused_gate_up) {
      out.push_back({p + "mlp.gate_up_proj.weight", {2 * c.d_ffn, c.d_model}, true});
    } else {
      if (c.mlp != MlpKind::Gelu) {
        out.push_back({p + "mlp.gate_proj.weight", {c.d_ffn, c.d_model}, true});
      }
      out.push_back({p + "mlp.up_proj.weight", {c.d_ffn, c.d_model}, true});
    }
    if (c.linear_biases) out.push_back({p + "mlp.up_proj.bias", {c.d_ffn}, false});
    if (!c.is_moe()) out.push_back({p + "mlp.down_proj.weight", {c.d_model, c.d_ffn}, true});
    if (c.linear_biases) out.push_back({p + "mlp.down_proj.bias", {c.d_model}, false});
    if (c.sandwich_norms) out.push_back({p + "mlp.output_norm.weight", {c.d_model}, false});
  }
  norm("model.norm");
  if (!c.tie_word_embeddings) {
    out.push_back(
        {"lm_head.weight", {c.lm_head_rows > 0 ? c.lm_head_rows : c.vocab_size, c.d_model}, true});
  }
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
