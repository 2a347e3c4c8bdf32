// The per-tensor rules of the presets. Behaviour reproduced from llama.cpp's quantizer (b4748) for
// the presets ember offers and no importance matrix; what it does for other presets (IQ1-IQ3,
// TQ) and for Falcon is left out.
//
// In words:
//  * Norms, 1-D tensors and the other tensors tensor_is_quantizable() excludes keep their type.
//  * F32/F16/BF16 presets: every weight matrix in that type, no other rule.
//  * The output projection (and token_embd when it doubles as the output, i.e. tied embeddings)
//    gets Q6_K, unless the preset's base is Q8_0 (kept) or its row is not a whole number of the
//    base type's blocks (Q8_0 then).
//  * attn_v, ffn_down and attn_output get more bits in the presets that say so, some only in the
//    layers where quantization error hurts most: the first and last eighth of the layers and
//    every third layer in between ("more-bits layers"), or the first 1/16, 1/8 or first few.
//  * Grouped-query attention makes attn_v small (n_heads / n_kv_heads times smaller than attn_q),
//    so with a ratio of 4 or more the lowest presets spend more bits on it; 70B-class models and
//    8-expert mixtures bump attn_v (and attn_k, attn_output) further.
//  * Finally a type whose blocks do not tile the row falls back to a 32-wide type of similar size
//    (dtype_fitting_row), and to a float type when even 32 does not divide the row.
#include "ember/model/quant_presets.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>

#include "ember/core/error.h"

namespace ember {

namespace {

using P = QuantPreset;

constexpr QuantPresetInfo kPresets[] = {
    {P::Q4_0, "Q4_0", 2, DType::Q4_0, "4.5 bpw legacy 4-bit (output in Q6_K)"},
    {P::Q4_1, "Q4_1", 3, DType::Q4_1, "5.0 bpw legacy 4-bit with offsets (output in Q6_K)"},
    {P::Q5_0, "Q5_0", 8, DType::Q5_0, "5.5 bpw legacy 5-bit (output in Q6_K)"},
    {P::Q5_1, "Q5_1", 9, DType::Q5_1, "6.0 bpw legacy 5-bit with offsets (output in Q6_K)"},
    {P::Q8_0, "Q8_0", 7, DType::Q8_0, "8.5 bpw, every matrix in Q8_0; nearly lossless"},
    {P::Q2_K, "Q2_K", 10, DType::Q2_K, "Q2_K, with attn_v/attn_output/ffn_down in Q3_K or Q4_K"},
    {P::Q2_K_S, "Q2_K_S", 21, DType::Q2_K,
     "Q2_K, a few more bits only in the first ffn_down layers (llama.cpp asks for an importance "
     "matrix here; ember quantizes without one)"},
    {P::Q3_K_S, "Q3_K_S", 11, DType::Q3_K, "Q3_K everywhere (output in Q6_K)"},
    {P::Q3_K_M, "Q3_K_M", 12, DType::Q3_K, "Q3_K, with attn_v/attn_output/ffn_down in Q4_K-Q5_K"},
    {P::Q3_K_L, "Q3_K_L", 13, DType::Q3_K, "Q3_K, with attn_v/attn_output/ffn_down in Q5_K"},
    {P::Q4_K_S, "Q4_K_S", 14, DType::Q4_K,
     "Q4_K, with attn_v/ffn_down of the first layers in Q5_K"},
    {P::Q4_K_M, "Q4_K_M", 15, DType::Q4_K,
     "Q4_K, with attn_v/ffn_down of the first/last eighth and every third layer in Q6_K"},
    {P::Q5_K_S, "Q5_K_S", 16, DType::Q5_K, "Q5_K everywhere (output in Q6_K)"},
    {P::Q5_K_M, "Q5_K_M", 17, DType::Q5_K,
     "Q5_K, with attn_v/ffn_down of the first/last eighth and every third layer in Q6_K"},
    {P::Q6_K, "Q6_K", 18, DType::Q6_K, "6.6 bpw, every matrix in Q6_K"},
    {P::IQ4_NL, "IQ4_NL", 25, DType::IQ4_NL, "4.5 bpw non-linear 4-bit in blocks of 32"},
    {P::IQ4_XS, "IQ4_XS", 30, DType::IQ4_XS, "4.25 bpw non-linear 4-bit in super-blocks of 256"},
    {P::F32, "F32", 0, DType::F32, "every matrix in f32 (no rounding)"},
    {P::F16, "F16", 1, DType::F16, "every matrix in f16"},
    {P::BF16, "BF16", 32, DType::BF16, "every matrix in bf16"},
};

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix.data(), suffix.size()) == 0;
}

bool contains(const std::string& s, const char* part) {
  return s.find(part) != std::string::npos;
}

// N of "blk.N.<...>", -1 for tensors outside the blocks.
int64_t layer_of(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  char* end = nullptr;
  const long long n = std::strtoll(name.c_str() + 4, &end, 10);
  return end != name.c_str() + 4 && *end == '.' ? n : -1;
}

// The layers llama.cpp spends more bits on in the _M presets: the first and the last eighth,
// and every third layer of the rest (counting from the end of the first eighth).
bool more_bits_layer(int64_t layer, int64_t n_layers) {
  const int64_t eighth = n_layers / 8;
  return layer < eighth || layer >= 7 * n_layers / 8 || (layer - eighth) % 3 == 2;
}

bool is_one_of(P p, std::initializer_list<P> set) {
  return std::find(set.begin(), set.end(), p) != set.end();
}

// The output projection: Q6_K, except where the base is Q8_0 already or does not tile the row.
DType output_type(P preset, DType base, int64_t row_length) {
  if (row_length % dtype_block_elems(base) != 0) return DType::Q8_0;
  if (preset == P::Q8_0) return DType::Q8_0;
  return DType::Q6_K;
}

DType attn_v_type(P p, DType type, int64_t layer, const QuantModelShape& m) {
  const int64_t gqa = m.gqa();
  if (p == P::Q2_K) {
    type = gqa >= 4 ? DType::Q4_K : DType::Q3_K;
  } else if (p == P::Q2_K_S && gqa >= 4) {
    type = DType::Q4_K;
  } else if (p == P::Q3_K_M) {
    type = layer < 2 ? DType::Q5_K : DType::Q4_K;
  } else if (p == P::Q3_K_L) {
    type = DType::Q5_K;
  } else if ((p == P::IQ4_NL || p == P::IQ4_XS) && gqa >= 4) {
    type = DType::Q5_K;
  } else if ((p == P::Q4_K_M || p == P::Q5_K_M) && more_bits_layer(layer, m.n_layers)) {
    type = DType::Q6_K;
  } else if (p == P::Q4_K_S && layer < 4) {
    type = DType::Q5_K;
  }
  // In 70B-class models eight query heads share each V head: attn_v is tiny, bits are cheap.
  if (m.is_70b && (type == DType::Q3_K || type == DType::Q4_K)) type = DType::Q5_K;
  if (m.n_experts == 8) type = DType::Q8_0;  // next to the experts, a negligible cost
  return type;
}

DType ffn_down_type(P p, DType type, int64_t layer, const QuantModelShape& m) {
  const int64_t n = m.n_layers;
  if (p == P::Q2_K) return DType::Q3_K;
  if (p == P::Q2_K_S) return layer < n / 8 ? DType::Q4_K : type;
  if (p == P::Q3_K_M) return layer < n / 16 ? DType::Q5_K : DType::Q4_K;
  if (p == P::Q3_K_L) return DType::Q5_K;
  if (p == P::Q4_K_M) return more_bits_layer(layer, n) ? DType::Q6_K : type;
  if ((p == P::IQ4_NL || p == P::IQ4_XS) && layer < n / 8) return DType::Q5_K;
  if (p == P::Q5_K_M && more_bits_layer(layer, n)) return DType::Q6_K;
  if (p == P::Q4_K_S && layer < n / 8) return DType::Q5_K;
  return type;
}

DType attn_output_type(P p, DType type, const QuantModelShape& m) {
  if (m.n_experts == 8) {
    const bool bump =
        is_one_of(p, {P::Q2_K, P::Q3_K_S, P::Q3_K_M, P::IQ4_NL, P::Q4_K_S, P::Q4_K_M, P::IQ4_XS});
    return bump ? DType::Q5_K : type;
  }
  if (p == P::Q2_K) return DType::Q3_K;
  if (p == P::Q3_K_M) return DType::Q4_K;
  if (p == P::Q3_K_L) return DType::Q5_K;
  return type;
}

// The rule's type before the row-fit fallback.
DType rule_type(P p, DType base, const std::string& name, int64_t row_length,
                const QuantModelShape& m) {
  const bool is_output = name == "output.weight" || (!m.has_output && name == "token_embd.weight");
  if (is_output) return output_type(p, base, row_length);
  if (name == "token_embd.weight") return base;
  if (contains(name, "attn_v.weight")) return attn_v_type(p, base, layer_of(name), m);
  if (contains(name, "attn_k.weight")) return m.n_experts == 8 ? DType::Q8_0 : base;
  if (contains(name, "attn_q.weight")) return base;
  if (contains(name, "ffn_down")) return ffn_down_type(p, base, layer_of(name), m);
  if (contains(name, "attn_output.weight")) return attn_output_type(p, base, m);
  if (contains(name, "attn_qkv.weight")) {  // fused Q/K/V (Phi-3 and others)
    if (p == P::Q3_K_M || p == P::Q3_K_L) return DType::Q4_K;
    if (p == P::Q4_K_M) return DType::Q5_K;
    if (p == P::Q5_K_M) return DType::Q6_K;
  }
  return base;
}

std::string upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

std::span<const QuantPresetInfo> quant_presets() {
  return kPresets;
}

const QuantPresetInfo& quant_preset_info(QuantPreset preset) {
  for (const QuantPresetInfo& info : kPresets) {
    if (info.preset == preset) return info;
  }
  throw Error("unknown quantization preset");
}

std::optional<QuantPreset> quant_preset_from_name(std::string_view name) {
  const std::string wanted = upper(name);
  for (const QuantPresetInfo& info : kPresets) {
    if (wanted == info.name) return info.preset;
  }
  return std::nullopt;
}

std::string quant_preset_names() {
  std::string out;
  for (const QuantPresetInfo& info : kPresets) {
    if (!out.empty()) out += ", ";
    out += info.name;
  }
  return out;
}

bool tensor_is_quantizable(const std::string& name, size_t n_dims) {
  if (n_dims < 2 || !ends_with(name, "weight")) return false;
  for (const char* never :
       {"_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d.weight", "attn_rel_b.weight"}) {
    if (contains(name, never)) return false;
  }
  return name != "position_embd.weight" && name != "token_types.weight";
}

std::optional<DType> preset_tensor_type(QuantPreset preset, const std::string& gguf_name,
                                        size_t n_dims, int64_t row_length,
                                        const QuantModelShape& model, DType float_fallback) {
  if (!tensor_is_quantizable(gguf_name, n_dims)) return std::nullopt;
  const DType base = quant_preset_info(preset).base;
  if (!dtype_is_quantized(base)) return base;  // F32/F16/BF16: no per-tensor rules
  const DType wanted = rule_type(preset, base, gguf_name, row_length, model);
  return dtype_fitting_row(wanted, row_length, float_fallback);
}

std::vector<std::optional<DType>> plan_preset_types(QuantPreset preset,
                                                    const std::vector<QuantTensorShape>& tensors,
                                                    QuantModelShape model, DType float_fallback) {
  model.has_output = std::any_of(tensors.begin(), tensors.end(), [](const QuantTensorShape& t) {
    return t.gguf_name == "output.weight";
  });
  std::vector<std::optional<DType>> types;
  types.reserve(tensors.size());
  for (const QuantTensorShape& t : tensors) {
    const int64_t row = t.shape.empty() ? 0 : t.shape.back();
    types.push_back(
        preset_tensor_type(preset, t.gguf_name, t.shape.size(), row, model, float_fallback));
  }
  return types;
}

std::vector<QuantPreset> matching_presets(const std::vector<QuantTensorShape>& tensors,
                                          const std::vector<DType>& types,
                                          const QuantModelShape& model) {
  std::vector<QuantPreset> out;
  for (const QuantPresetInfo& info : kPresets) {
    for (DType fallback : {DType::F16, DType::F32, DType::BF16}) {
      const auto planned = plan_preset_types(info.preset, tensors, model, fallback);
      bool same = !tensors.empty();
      for (size_t i = 0; i < tensors.size() && same; ++i) {
        same = !planned[i] || *planned[i] == types[i];
      }
      if (same) {
        out.push_back(info.preset);
        break;
      }
    }
  }
  return out;
}

}  // namespace ember
