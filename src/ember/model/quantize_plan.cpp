#include "ember/model/quantize_plan.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

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
const TensorView& stored_view(const Checkpoint& ckpt, const ExpectedTensor& expected) {
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
  return v;
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

void add_rope_freqs(QuantizePlan& plan, const ModelConfig& c) {
  std::vector<float> factors = rope_freq_factors(c);
  if (factors.empty()) return;
  auto data = std::make_shared<std::vector<float>>(std::move(factors));
  PlannedTensor t;
  t.name = "rope_freqs.weight";
  t.shape = {static_cast<int64_t>(data->size())};
  t.source = reinterpret_cast<const uint8_t*>(data->data());
  plan.generated.push_back(std::move(data));
  plan.tensors.push_back(std::move(t));
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
  if (c.architecture != "llama" && c.architecture != "qwen2") {
    throw Error::in_file(ErrorKind::Unsupported, input,
                         "ember quantize writes llama and qwen2 models only so far (this is " +
                             c.architecture + ")");
  }
  // GGUF's Llama layout rotates interleaved pairs; HF checkpoints store halves.
  const bool permute = c.architecture == "llama" && !ckpt.qk_rows_interleaved;
  if (permute && c.attention_bias) {
    throw Error::in_file(ErrorKind::Unsupported, input,
                         "Llama models with attention biases cannot be written as GGUF yet");
  }
  QuantizePlan plan;
  plan.preset = preset;
  add_rope_freqs(plan, c);
  const QuantModelShape model = checkpoint_shape(c);
  for (const ExpectedTensor& e : expected_tensors(c)) {
    const TensorView& v = stored_view(ckpt, e);
    PlannedTensor t;
    t.name = gguf_name_from_hf(e.name).value_or("");
    if (t.name.empty()) throw Error("no GGUF name for tensor " + e.name);
    t.shape = e.shape;
    t.source_dtype = v.dtype;
    t.source = v.data;
    t.target = target_for(preset, t.name, t.shape, v.dtype, DType::F32, model);
    const bool is_qk = e.name.ends_with("q_proj.weight") || e.name.ends_with("k_proj.weight");
    t.permute_head_dim = permute && is_qk ? c.head_dim : 0;
    plan.tensors.push_back(std::move(t));
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
