// The quantization presets people know from llama.cpp's `llama-quantize` (Q4_K_M, Q8_0, ...) as
// per-tensor type rules. A preset is not one type: it names a base type for the weight matrices
// and then gives some tensors more bits, by name, by layer and by the model's shape. The rules
// here reproduce the choices llama.cpp (release b4748, no importance matrix) makes for the
// Llama-family tensor names (token_embd, output, blk.N.attn_q/k/v/output, blk.N.ffn_gate/up/down);
// tests/unit/model/quant_presets_test.cpp holds them to the types llama.cpp wrote into the
// quant-zoo files.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ember/core/dtype.h"

namespace ember {

enum class QuantPreset : uint8_t {
  F32,
  F16,
  BF16,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q8_0,
  Q2_K,
  Q2_K_S,
  Q3_K_S,
  Q3_K_M,
  Q3_K_L,
  Q4_K_S,
  Q4_K_M,
  Q5_K_S,
  Q5_K_M,
  Q6_K,
  IQ4_NL,
  IQ4_XS,
};

struct QuantPresetInfo {
  QuantPreset preset;
  const char* name;    // "Q4_K_M", as llama-quantize spells it
  uint32_t file_type;  // GGUF general.file_type (llama.cpp's llama_ftype number)
  DType base;          // type of the matrices no rule singles out
  const char* summary;
};

// Every preset, in the order `ember quantize --help` lists them.
std::span<const QuantPresetInfo> quant_presets();
const QuantPresetInfo& quant_preset_info(QuantPreset preset);
// Case-insensitive ("q4_k_m" = "Q4_K_M"); nullopt for an unknown name.
std::optional<QuantPreset> quant_preset_from_name(std::string_view name);
// "Q4_0, Q4_1, ..., BF16" for messages and help.
std::string quant_preset_names();

// What the rules need to know about the model.
struct QuantModelShape {
  int64_t n_layers = 0;
  int64_t n_heads = 0;
  int64_t n_kv_heads = 0;
  int64_t n_experts = 0;   // 0 or 1: a dense model
  bool has_output = true;  // false: output and token_embd share token_embd.weight (tied)
  // llama.cpp's "70B" class (80 layers; for Llama also grouped-query attention, as Llama 2 70B).
  bool is_70b = false;
  int64_t gqa() const { return n_kv_heads > 0 ? n_heads / n_kv_heads : 1; }
};

// Whether a tensor is quantized at all: weight matrices (2 or more dimensions, name ending in
// "weight"), never norms, expert routers or positional/token-type embeddings.
bool tensor_is_quantizable(const std::string& gguf_name, size_t n_dims);

// The type `preset` stores the tensor `gguf_name` with; `row_length` is its innermost dimension.
// nullopt for a tensor the preset leaves as it is (tensor_is_quantizable false). A rule's type
// whose blocks do not fit the row falls back as llama.cpp does (dtype_fitting_row), and to
// `float_fallback` when no quantized type fits (llama.cpp uses F16 there).
std::optional<DType> preset_tensor_type(QuantPreset preset, const std::string& gguf_name,
                                        size_t n_dims, int64_t row_length,
                                        const QuantModelShape& model, DType float_fallback);

struct QuantTensorShape {
  std::string gguf_name;
  std::vector<int64_t> shape;  // row-major
};

// preset_tensor_type for every tensor of a model, with has_output taken from the names.
std::vector<std::optional<DType>> plan_preset_types(QuantPreset preset,
                                                    const std::vector<QuantTensorShape>& tensors,
                                                    QuantModelShape model, DType float_fallback);

// The presets whose rules give exactly `types` (one per tensor; entries the preset leaves alone
// are not compared) for this model, with float fallbacks to F16, F32 or BF16 all accepted.
std::vector<QuantPreset> matching_presets(const std::vector<QuantTensorShape>& tensors,
                                          const std::vector<DType>& types,
                                          const QuantModelShape& model);

}  // namespace ember
