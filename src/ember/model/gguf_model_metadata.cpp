#include "ember/model/gguf_model_metadata.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numbers>

#include "ember/core/error.h"
#include "ember/formats/gguf_writer.h"
#include "ember/model/model_loader.h"
#include "ember/model/weights.h"
#include "ember/tokenizer/bpe_tokenizer.h"
#include "ember/tokenizer/chat_template.h"
#include "ember/tokenizer/gguf_tokenizer_metadata.h"
#include "ember/tokenizer/spm_tokenizer.h"

namespace ember {

namespace {

namespace fs = std::filesystem;

uint32_t u32_of(int64_t v, const std::string& what) {
  if (v < 0 || v > UINT32_MAX) {
    throw Error(ErrorKind::InvalidArgument, what + " " + std::to_string(v) + " does not fit GGUF");
  }
  return static_cast<uint32_t>(v);
}

// RoPE scaling keys as llama.cpp reads them (llama3's factors go as the rope_freqs tensor and
// LongRoPE's as rope_factors_*, both written by the quantize plan).
void add_rope_scaling(GgufWriter& w, const ModelConfig& c) {
  const std::string a = c.architecture + ".";
  if (c.rope_scaling == RopeScaling::Linear || c.rope_scaling == RopeScaling::Yarn) {
    w.set(a + "rope.scaling.type",
          gguf_value::string(c.rope_scaling == RopeScaling::Linear ? "linear" : "yarn"));
    w.set(a + "rope.scaling.factor", gguf_value::f32(c.rope_factor));
  }
  if (c.rope_scaling == RopeScaling::Yarn || c.rope_scaling == RopeScaling::LongRope) {
    w.set(a + "rope.scaling.original_context_length",
          gguf_value::u32(u32_of(c.rope_original_max_position, "original context")));
    w.set(a + "rope.scaling.attn_factor", gguf_value::f32(c.rope_mscale()));
  }
  if (c.rope_local_theta > 0.0f)
    w.set(a + "rope.freq_base_swa", gguf_value::f32(c.rope_local_theta));
}

// Windows, soft-caps and a query scale other than 1/sqrt(head_dim). llama.cpp b4748 derives
// Gemma's scale from key_length and fixes Gemma 3's window pattern at 6; the attention.scale and
// sliding_window_pattern keys carry what a checkpoint says otherwise (ember reads them back).
void add_attention_features(GgufWriter& w, const ModelConfig& c) {
  const std::string a = c.architecture + ".";
  // llama.cpp requires Phi-3's window key: a model without one gets its whole context.
  const int64_t window = c.sliding_window > 0       ? c.sliding_window
                         : c.architecture == "phi3" ? c.max_position_embeddings
                                                    : 0;
  if (window > 0) {
    w.set(a + "attention.sliding_window", gguf_value::u32(u32_of(window, "window")));
    if (c.architecture == "gemma3") {
      w.set(a + "attention.sliding_window_pattern",
            gguf_value::u32(u32_of(c.sliding_window_pattern, "window pattern")));
    }
  }
  if (c.attn_softcap > 0.0f) w.set(a + "attn_logit_softcapping", gguf_value::f32(c.attn_softcap));
  if (c.final_softcap > 0.0f) {
    w.set(a + "final_logit_softcapping", gguf_value::f32(c.final_softcap));
  }
  const float default_scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  if (c.query_scale > 0.0f && std::fabs(c.query_scale - default_scale) > 1e-7f * default_scale) {
    w.set(a + "attention.scale", gguf_value::f32(c.query_scale));
  }
}

std::string model_name(const Checkpoint& ckpt) {
  fs::path p(ckpt.path);
  if (p.filename().empty()) p = p.parent_path();  // "dir/" -> "dir"
  return fs::is_directory(p) ? p.filename().string() : p.stem().string();
}

void add_architecture(GgufWriter& w, const Checkpoint& ckpt) {
  const ModelConfig& c = ckpt.config;
  const std::string a = c.architecture + ".";
  auto u32 = [&](const std::string& key, int64_t v) {
    w.set(a + key, gguf_value::u32(u32_of(v, key)));
  };
  auto f32 = [&](const std::string& key, float v) { w.set(a + key, gguf_value::f32(v)); };
  const bool gemma = c.architecture == "gemma2" || c.architecture == "gemma3";
  w.set("general.architecture", gguf_value::string(c.architecture));
  w.set("general.name", gguf_value::string(model_name(ckpt)));
  u32("context_length", c.max_position_embeddings);
  u32("embedding_length", c.d_model);
  u32("feed_forward_length", c.d_ffn);
  u32("block_count", c.n_layers);
  u32("attention.head_count", c.n_heads);
  u32("attention.head_count_kv", c.n_kv_heads);
  if (c.head_dim * c.n_heads != c.d_model || gemma) {
    u32("attention.key_length", c.head_dim);
    u32("attention.value_length", c.head_dim);
  }
  if (c.norm == NormKind::Layer) {
    f32("attention.layer_norm_epsilon", c.rms_norm_eps);
  } else {
    f32("attention.layer_norm_rms_epsilon", c.rms_norm_eps);
  }
  if (!c.learned_positions) {
    // Dynamic NTK has no GGUF type: its fixed base is an ordinary RoPE base there.
    f32("rope.freq_base", c.rope_scaling == RopeScaling::Dynamic
                              ? static_cast<float>(dynamic_ntk_base(c))
                              : c.rope_theta);
    u32("rope.dimension_count", c.rope_dim);
  }
  u32("vocab_size", c.vocab_size);
  if (c.is_moe()) {
    u32("expert_count", c.n_experts);
    u32("expert_used_count", c.n_experts_used);
    if (c.d_expert_ffn != c.d_ffn) u32("expert_feed_forward_length", c.d_expert_ffn);
    if (c.d_shared_expert_ffn > 0) {
      u32("expert_shared_feed_forward_length", c.d_shared_expert_ffn);
    }
    // The family rule (model_config_gguf.cpp) decides when the key is absent; written when the
    // checkpoint's norm_topk_prob says otherwise.
    if (c.expert_weights_normalized != gguf_family_normalizes_experts(c.architecture)) {
      w.set(a + "expert_weights_norm", gguf_value::boolean(c.expert_weights_normalized));
    }
  }
  add_rope_scaling(w, c);
  add_attention_features(w, c);
}

nlohmann::json read_json_object(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return nlohmann::json::object();
  nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return j.is_object() ? j : nlohmann::json::object();
}

// The pad token the source names: tokenizer_config.json's pad_token (a string or {"content": ...})
// beside the tokenizer, else config.json's pad_token_id.
std::optional<int32_t> pad_token_id(const Checkpoint& ckpt, const Tokenizer& tokenizer) {
  if (ckpt.tokenizer_path.empty()) return std::nullopt;
  const fs::path dir = fs::path(ckpt.tokenizer_path).parent_path();
  const nlohmann::json tok_config = read_json_object(dir / "tokenizer_config.json");
  if (tok_config.contains("pad_token")) {
    const nlohmann::json& pad = tok_config["pad_token"];
    const nlohmann::json& text = pad.is_object() ? pad.value("content", nlohmann::json()) : pad;
    if (!text.is_string()) return std::nullopt;
    int32_t id = -1;
    if (const auto* bpe = dynamic_cast<const BpeTokenizer*>(&tokenizer)) {
      id = bpe->find_token(text.get<std::string>());
    } else if (const auto* spm = dynamic_cast<const SpmTokenizer*>(&tokenizer)) {
      id = spm->find_piece(text.get<std::string>());
    }
    return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
  }
  const nlohmann::json config = read_json_object(dir / "config.json");
  const nlohmann::json& id = config.value("pad_token_id", nlohmann::json());
  if (id.is_number_integer() && id.get<int64_t>() >= 0 &&
      id.get<int64_t>() < tokenizer.vocab_size()) {
    return static_cast<int32_t>(id.get<int64_t>());
  }
  return std::nullopt;
}

void add_tokenizer(GgufWriter& w, const Checkpoint& ckpt) {
  try {
    const std::unique_ptr<Tokenizer> tokenizer = load_checkpoint_tokenizer(ckpt);
    TokenizerExportOptions o;
    o.vocab_size = ckpt.config.vocab_size;
    o.pad_id = pad_token_id(ckpt, *tokenizer);
    o.chat_template = find_chat_template_source(ckpt.path, nullptr);
    add_tokenizer_metadata(w, *tokenizer, o);
  } catch (const Error& e) {
    throw Error(e.kind(), ckpt.path + ": cannot write the tokenizer into the GGUF file: " +
                              std::string(e.what()));
  }
}

}  // namespace

void add_model_metadata(GgufWriter& writer, const Checkpoint& checkpoint) {
  add_architecture(writer, checkpoint);
  add_tokenizer(writer, checkpoint);
}

std::vector<float> rope_freq_factors(const ModelConfig& config) {
  if (config.rope_scaling != RopeScaling::Llama3) return {};
  ModelConfig plain = config;
  plain.rope_scaling = RopeScaling::None;
  const std::vector<float> scaled = rope_inverse_frequencies(config);
  const std::vector<float> unscaled = rope_inverse_frequencies(plain);
  std::vector<float> factors(scaled.size());
  for (size_t i = 0; i < scaled.size(); ++i) {
    factors[i] = static_cast<float>(static_cast<double>(unscaled[i]) / scaled[i]);
  }
  return factors;
}

void set_quantization_metadata(GgufWriter& writer, QuantPreset preset) {
  writer.erase("general.quantization_version");
  writer.erase("general.file_type");
  writer.set("general.quantization_version", gguf_value::u32(2));
  writer.set("general.file_type", gguf_value::u32(quant_preset_info(preset).file_type));
}

}  // namespace ember
