#include "ember/model/quantize_plan.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ember/core/dequantize.h"
#include "ember/core/error.h"
#include "ember/model/gguf_model_metadata.h"
#include "ember/model/tensor_names.h"

namespace ember {

int64_t PlannedTensor::rows() const {
  int64_t n = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) n *= shape[d];
  return n;
}

namespace {

bool is_gguf_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::equal(magic, magic + 4, "GGUF");
}

// N of "blk.N.", -1 for the tensors outside the layers.
int64_t layer_index(const std::string& name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  char* end = nullptr;
  const long long n = std::strtoll(name.c_str() + 4, &end, 10);
  return end != name.c_str() + 4 && *end == '.' ? n : -1;
}

// A GGUF key that may hold one number or one per layer (the largest is what the rules need).
int64_t int_or_max(const GgufFile& gguf, const std::string& key, int64_t fallback) {
  const GgufValue* v = gguf.find(key);
  if (v == nullptr) return fallback;
  if (v->type != GgufType::Array) return v->as_int().value_or(fallback);
  int64_t best = fallback;
  for (const GgufValue& e : v->array) best = std::max(best, e.as_int().value_or(fallback));
  return best;
}

// A quantized source falls back to f32 (its values are not f16/bf16-exact), a float source to
// its own type: the file holds what `--dtype` would build at load.
DType float_fallback_for(DType source) {
  return dtype_is_quantized(source) ? DType::F32 : source;
}

DType target_for(QuantPreset preset, const std::string& name, const std::vector<int64_t>& shape,
                 DType source, DType keep, const QuantModelShape& model) {
  const std::optional<DType> t = preset_tensor_type(preset, name, shape.size(), shape.back(), model,
                                                    float_fallback_for(source));
  return t.value_or(keep);
}

QuantizePlan plan_gguf(const std::string& input, QuantPreset preset) {
  QuantizePlan plan;
  plan.preset = preset;
  plan.gguf = std::make_shared<const GgufFile>(input);
  plan.mappings.push_back(plan.gguf->mapping());
  QuantModelShape model = quant_model_shape(*plan.gguf);
  model.has_output = plan.gguf->find_tensor("output.weight") != nullptr;
  for (const GgufTensorInfo& info : plan.gguf->tensors()) {
    PlannedTensor t;
    t.name = info.name;
    t.shape = info.shape;
    t.source_dtype = info.dtype;
    t.source = plan.gguf->view(info).data;
    // Tensors the preset leaves alone (norms, rope_freqs, ...) keep their stored type.
    t.target = target_for(preset, t.name, t.shape, info.dtype, info.dtype, model);
    plan.tensors.push_back(std::move(t));
  }
  // llama.cpp's quantizer writes the tensors ordered by layer (non-layer tensors first), then by
  // name; so does this, and a float preset of a float source gives llama.cpp's file byte for byte.
  std::stable_sort(plan.tensors.begin(), plan.tensors.end(),
                   [](const PlannedTensor& a, const PlannedTensor& b) {
                     const int64_t la = layer_index(a.name), lb = layer_index(b.name);
                     return la != lb ? la < lb : a.name < b.name;
                   });
  return plan;
}

// The stored tensor `expected` names, checked as the loader checks it.
const StoredTensor& stored_tensor(const Checkpoint& ckpt, const ExpectedTensor& expected) {
  auto it = ckpt.tensors.find(expected.name);
  if (it == ckpt.tensors.end()) {
    throw Error::in_tensor(ErrorKind::InvalidFile, ckpt.path, expected.name,
                           "missing tensor " + expected.name);
  }
  const TensorView& v = it->second.view;
  std::vector<int64_t> shape = v.shape;
  if (!expected.is_matrix && shape.size() == 2 && shape[0] == 1) shape.erase(shape.begin());
  if (shape != expected.shape) {
    throw Error::in_tensor(ErrorKind::InvalidFile, ckpt.path, expected.name,
                           "tensor " + it->second.stored_name + " has shape " +
                               shape_to_string(v.shape) + ", expected " +
                               shape_to_string(expected.shape));
  }
  return it->second;
}

// A stored tensor as f32 in the layout the GGUF file wants (transposed back to [out, in] when the
// file stores [in, out]), plus `offset` on every value.
std::vector<float> float_copy(const StoredTensor& stored, const std::vector<int64_t>& shape,
                              float offset) {
  const TensorView& v = stored.view;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> flat(static_cast<size_t>(n));
  dequantize_row(v.dtype, v.data, flat.data(), n);
  if (stored.transposed) {
    const int64_t rows = shape[0], cols = shape[1];  // stored as [cols, rows]
    std::vector<float> t(flat.size());
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t k = 0; k < cols; ++k) t[r * cols + k] = flat[k * rows + r];
    }
    flat.swap(t);
  }
  for (float& x : flat) x += offset;
  return flat;
}

QuantModelShape checkpoint_shape(const ModelConfig& c) {
  QuantModelShape m;
  m.n_layers = c.n_layers;
  m.n_heads = c.n_heads;
  m.n_kv_heads = c.n_kv_heads;
  m.has_output = !c.tie_word_embeddings;
  m.is_70b = c.n_layers == 80 && (c.architecture == "qwen2" || c.n_heads != c.n_kv_heads);
  return m;
}

void add_vector(QuantizePlan& plan, const std::string& name, std::vector<float> values) {
  auto data = std::make_shared<std::vector<float>>(std::move(values));
  PlannedTensor t;
  t.name = name;
  t.shape = {static_cast<int64_t>(data->size())};
  t.source = reinterpret_cast<const uint8_t*>(data->data());
  plan.generated.push_back(std::move(data));
  plan.tensors.push_back(std::move(t));
}

// Phi-3's LongRoPE factors travel as tensors in GGUF.
void add_longrope_factors(QuantizePlan& plan, const ModelConfig& c) {
  if (c.rope_scaling != RopeScaling::LongRope) return;
  add_vector(plan, "rope_factors_long.weight", c.rope_long_factors);
  add_vector(plan, "rope_factors_short.weight", c.rope_short_factors);
}

void add_rope_freqs(QuantizePlan& plan, const ModelConfig& c) {
  std::vector<float> factors = rope_freq_factors(c);
  if (!factors.empty()) add_vector(plan, "rope_freqs.weight", std::move(factors));
}

// An HF mixture's experts, one tensor each (mlp.experts.E.gate_proj.weight), as the one
// [E, rows, cols] tensor GGUF stores per projection (ffn_gate_exps), in f32.
PlannedTensor merged_experts(const Checkpoint& ckpt, const ExpectedTensor& e, QuantizePlan& plan,
                             QuantPreset preset, const QuantModelShape& model) {
  const int64_t E = e.shape[0], rows = e.shape[1], cols = e.shape[2];
  const size_t at = e.name.find("experts.") + 8;  // "...mlp.experts." + "gate_proj.weight"
  auto data = std::make_shared<std::vector<float>>();
  data->reserve(static_cast<size_t>(E * rows * cols));
  for (int64_t x = 0; x < E; ++x) {
    const ExpectedTensor one{
        e.name.substr(0, at) + std::to_string(x) + "." + e.name.substr(at), {rows, cols}, true};
    const std::vector<float> f = float_copy(stored_tensor(ckpt, one), one.shape, 0.0f);
    data->insert(data->end(), f.begin(), f.end());
  }
  PlannedTensor t;
  t.name = gguf_name_from_hf(e.name, ckpt.config.architecture).value();
  t.shape = e.shape;
  t.source_dtype = DType::F32;
  t.source = reinterpret_cast<const uint8_t*>(data->data());
  plan.generated.push_back(std::move(data));
  t.target = target_for(preset, t.name, t.shape, t.source_dtype, DType::F32, model);
  return t;
}

QuantizePlan plan_checkpoint(const std::string& input, QuantPreset preset,
                             const std::string& tokenizer_path) {
  CheckpointOptions options;
  options.tokenizer_path = tokenizer_path;
  Checkpoint ckpt = open_checkpoint(input, options);
  if (ckpt.format == CheckpointFormat::ConfigOnly || ckpt.tensors.empty()) {
    throw Error::in_file(ErrorKind::InvalidFile, input, "no weights to quantize");
  }
  const ModelConfig& c = ckpt.config;
  // GGUF's Llama layout rotates interleaved pairs; HF checkpoints store halves (every other
  // architecture's GGUF keeps HF's halves).
  const bool permute = c.architecture == "llama" && !ckpt.qk_rows_interleaved;
  if (permute && c.attention_bias) {
    throw Error::in_file(ErrorKind::Unsupported, input,
                         "Llama models with attention biases cannot be written as GGUF yet");
  }
  QuantizePlan plan;
  plan.preset = preset;
  add_rope_freqs(plan, c);
  add_longrope_factors(plan, c);
  const QuantModelShape model = checkpoint_shape(c);
  for (const ExpectedTensor& e : expected_tensors(c)) {
    if (e.shape.size() == 3 && ckpt.tensors.count(e.name) == 0) {
      plan.tensors.push_back(merged_experts(ckpt, e, plan, preset, model));
      continue;
    }
    const StoredTensor& stored = stored_tensor(ckpt, e);
    PlannedTensor t;
    t.name = gguf_name_from_hf(e.name, c.architecture).value_or("");
    if (t.name.empty()) throw Error("no GGUF name for tensor " + e.name);
    t.shape = e.shape;
    t.source_dtype = stored.view.dtype;
    t.source = stored.view.data;
    // GPT-2's Conv1D [in, out] is written as GGUF's [out, in] rows; HF Gemma's norms store w where
    // GGUF stores the 1 + w they apply. Both are made in f32 here.
    const bool gemma_norm = c.norm_weight_offset && !e.is_matrix && e.name.ends_with("norm.weight");
    if (stored.transposed || gemma_norm) {
      auto data = std::make_shared<std::vector<float>>(
          float_copy(stored, e.shape, gemma_norm ? 1.0f : 0.0f));
      t.source_dtype = DType::F32;
      t.source = reinterpret_cast<const uint8_t*>(data->data());
      plan.generated.push_back(std::move(data));
    }
    t.target = target_for(preset, t.name, t.shape, t.source_dtype, DType::F32, model);
    const bool is_qk = e.name.ends_with("q_proj.weight") || e.name.ends_with("k_proj.weight");
    t.permute_head_dim = permute && is_qk ? c.head_dim : 0;
    plan.tensors.push_back(std::move(t));
  }
  // llama.cpp's GPT-2 needs output.weight even when it is the embedding (its converter writes the
  // tied matrix twice); so does this.
  if (c.architecture == "gpt2" && c.tie_word_embeddings) {
    auto embd = std::find_if(plan.tensors.begin(), plan.tensors.end(),
                             [](const PlannedTensor& t) { return t.name == "token_embd.weight"; });
    PlannedTensor out = *embd;
    out.name = "output.weight";
    out.target = target_for(preset, out.name, out.shape, out.source_dtype, DType::F32, model);
    plan.tensors.push_back(std::move(out));
  }
  plan.mappings = ckpt.mappings;
  plan.checkpoint = std::move(ckpt);
  return plan;
}

}  // namespace

QuantModelShape quant_model_shape(const GgufFile& gguf) {
  const GgufValue* arch_value = gguf.find("general.architecture");
  const std::string arch =
      arch_value != nullptr && arch_value->type == GgufType::String ? arch_value->string_value : "";
  const std::string a = arch + ".";
  QuantModelShape m;
  m.n_layers = int_or_max(gguf, a + "block_count", 0);
  m.n_heads = int_or_max(gguf, a + "attention.head_count", 0);
  m.n_kv_heads = int_or_max(gguf, a + "attention.head_count_kv", m.n_heads);
  m.n_experts = int_or_max(gguf, a + "expert_count", 0);
  m.is_70b =
      m.n_layers == 80 && (arch == "qwen2" || (arch == "llama" && m.n_heads != m.n_kv_heads));
  if (m.n_layers <= 0) {
    throw Error::in_file(ErrorKind::InvalidFile, gguf.path(),
                         "metadata key '" + a + "block_count' is missing or not positive");
  }
  return m;
}

QuantizePlan plan_quantization(const std::string& input, QuantPreset preset,
                               const std::string& tokenizer_path) {
  std::error_code ec;
  if (!std::filesystem::exists(input, ec)) {
    throw Error::in_file(ErrorKind::NotFound, input, "no such file or directory");
  }
  if (!std::filesystem::is_directory(input, ec) && is_gguf_file(input)) {
    return plan_gguf(input, preset);
  }
  return plan_checkpoint(input, preset, tokenizer_path);
}

}  // namespace ember
