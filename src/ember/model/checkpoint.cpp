#include "ember/model/checkpoint.h"

#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "ember/core/error.h"
#include "ember/formats/gguf.h"
#include "ember/formats/safetensors.h"
#include "ember/model/model_config_sources.h"
#include "ember/model/tensor_names.h"
#include "ember/tokenizer/load_tokenizer.h"

namespace fs = std::filesystem;

namespace ember {

const char* format_name(CheckpointFormat format) {
  switch (format) {
    case CheckpointFormat::HfDirectory:
      return "hf-safetensors";
    case CheckpointFormat::Gguf:
      return "gguf";
    case CheckpointFormat::Llama2c:
      return "llama2c";
    case CheckpointFormat::ConfigOnly:
      return "config";
  }
  return "?";
}

namespace {

bool file_starts_with(const fs::path& path, const char* magic, size_t n) {
  std::ifstream in(path, std::ios::binary);
  std::string head(n, '\0');
  return in.read(head.data(), static_cast<std::streamsize>(n)) && head == std::string(magic, n);
}

std::string read_torch_dtype(const fs::path& config_path) {
  // Only picks --dummy's default dtype; load_hf_config has validated the file already.
  std::ifstream in(config_path);
  auto json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (json.is_object() && json.contains("torch_dtype") && json["torch_dtype"].is_string()) {
    return json["torch_dtype"].get<std::string>();
  }
  return "";
}

void add_tensor(Checkpoint& ckpt, const std::string& stored_name, TensorView view,
                const std::optional<std::string>& hf_name) {
  StoredTensor stored{stored_name, view};
  if (hf_name) {
    stored.view.name = *hf_name;
    ckpt.tensors[*hf_name] = stored;
  }
  ckpt.all_tensors.push_back(stored);
}

Checkpoint open_hf(const fs::path& dir, const CheckpointOptions& options) {
  Checkpoint ckpt;
  ckpt.format = CheckpointFormat::HfDirectory;
  fs::path config_path = dir / "config.json";
  if (!fs::exists(config_path)) throw Error(dir.string() + ": no config.json in this directory");
  ckpt.config_source = config_path.string();
  ckpt.config = load_hf_config(config_path.string());
  ckpt.torch_dtype = read_torch_dtype(config_path);
  if (fs::exists(dir / "tokenizer.json")) ckpt.tokenizer_path = (dir / "tokenizer.json").string();
  if (options.dummy) {
    ckpt.format = CheckpointFormat::ConfigOnly;
    return ckpt;
  }
  HfCheckpoint hf = open_hf_checkpoint(dir.string());
  ckpt.mappings = hf.mappings;
  for (auto& [name, view] : hf.tensors) add_tensor(ckpt, name, view, name);
  return ckpt;
}

Checkpoint open_gguf(const fs::path& path) {
  auto gguf = std::make_shared<const GgufFile>(path.string());
  Checkpoint ckpt;
  ckpt.format = CheckpointFormat::Gguf;
  ckpt.config_source = path.string();
  ckpt.config = config_from_gguf(*gguf);
  ckpt.gguf = gguf;
  ckpt.mappings.push_back(gguf->mapping());
  for (const auto& info : gguf->tensors()) {
    TensorView view = gguf->view(info);
    if (info.name == "rope_freqs.weight") {
      if (view.dtype != DType::F32 || view.numel() != ckpt.config.rope_dim / 2) {
        throw Error(path.string() + ": tensor rope_freqs.weight must be f32 [rope_dim/2]");
      }
      const float* f = reinterpret_cast<const float*>(view.data);
      ckpt.rope_freq_factors.assign(f, f + view.numel());
    }
    add_tensor(ckpt, info.name, view, hf_name_from_gguf(info.name));
  }
  ckpt.config.tie_word_embeddings = ckpt.tensors.count("lm_head.weight") == 0;
  ckpt.config.attention_bias = ckpt.tensors.count("model.layers.0.self_attn.q_proj.bias") != 0;
  ckpt.qk_rows_interleaved = ckpt.config.architecture == "llama";
  return ckpt;
}

Checkpoint open_llama2c(const fs::path& path, const CheckpointOptions& options) {
  Llama2cCheckpoint l2c = load_llama2c_checkpoint(path.string());
  Checkpoint ckpt;
  ckpt.format = CheckpointFormat::Llama2c;
  ckpt.config_source = path.string();
  ckpt.config = l2c.config;
  ckpt.mappings.push_back(l2c.mapping);
  for (auto& [name, view] : l2c.tensors) add_tensor(ckpt, name, view, name);
  ckpt.qk_rows_interleaved = true;
  ckpt.tokenizer_path = options.tokenizer_path.empty()
                            ? find_llama2c_tokenizer(path, ckpt.config.vocab_size)
                            : options.tokenizer_path;
  return ckpt;
}

}  // namespace

Checkpoint open_checkpoint(const std::string& path_string, const CheckpointOptions& options) {
  fs::path path(path_string);
  std::error_code ec;
  if (!fs::exists(path, ec)) throw Error(path_string + ": no such file or directory");
  Checkpoint ckpt;
  if (fs::is_directory(path)) {
    ckpt = open_hf(path, options);
  } else if (path.extension() == ".json") {
    if (!options.dummy) {
      throw Error(path_string +
                  ": a config.json alone has no weights; pass --dummy for random "
                  "weights, or give the checkpoint directory");
    }
    ckpt.format = CheckpointFormat::ConfigOnly;
    ckpt.config_source = path_string;
    ckpt.config = load_hf_config(path_string);
    ckpt.torch_dtype = read_torch_dtype(path);
    fs::path tok = path.parent_path() / "tokenizer.json";
    if (fs::exists(tok)) ckpt.tokenizer_path = tok.string();
  } else if (file_starts_with(path, "GGUF", 4)) {
    ckpt = open_gguf(path);
  } else if (path.extension() == ".bin") {
    ckpt = open_llama2c(path, options);
  } else if (path.extension() == ".gguf") {
    throw Error(path_string + ": bad GGUF magic (expected \"GGUF\")");
  } else {
    throw Error(path_string +
                ": unrecognised model format (expected an HF directory, a .gguf "
                "file, a llama2.c .bin, or config.json with --dummy)");
  }
  ckpt.path = path_string;
  if (!options.tokenizer_path.empty()) ckpt.tokenizer_path = options.tokenizer_path;
  return ckpt;
}

ModelConfig config_from_gguf(const GgufFile& gguf) {
  ModelConfig c;
  c.architecture = gguf.get_string("general.architecture");
  if (c.architecture != "llama" && c.architecture != "qwen2") {
    throw Error(gguf.path() + ": unsupported architecture '" + c.architecture +
                "' (ember runs llama and qwen2)");
  }
  const std::string a = c.architecture + ".";
  auto int_or = [&](const std::string& key, int64_t fallback) {
    return gguf.find(key) ? gguf.get_int(key) : fallback;
  };
  auto float_or = [&](const std::string& key, double fallback) {
    return gguf.find(key) ? gguf.get_float(key) : fallback;
  };
  c.d_model = gguf.get_int(a + "embedding_length");
  c.d_ffn = gguf.get_int(a + "feed_forward_length");
  c.n_layers = gguf.get_int(a + "block_count");
  c.n_heads = gguf.get_int(a + "attention.head_count");
  c.n_kv_heads = int_or(a + "attention.head_count_kv", c.n_heads);
  c.head_dim = c.n_heads > 0 ? int_or(a + "attention.key_length", c.d_model / c.n_heads) : 0;
  c.rope_dim = int_or(a + "rope.dimension_count", c.head_dim);
  c.rms_norm_eps = static_cast<float>(float_or(a + "attention.layer_norm_rms_epsilon", 1e-5));
  c.rope_theta = static_cast<float>(float_or(a + "rope.freq_base", 10000.0));
  c.max_position_embeddings = int_or(a + "context_length", 2048);
  if (const GgufValue* v = gguf.find(a + "vocab_size")) {
    c.vocab_size = v->as_int().value_or(0);
  } else if (const auto* tok = gguf.find_tensor("token_embd.weight")) {
    c.vocab_size = tok->shape.empty() ? 0 : tok->shape[0];
  }
  c.bos_token_id = static_cast<int32_t>(int_or("tokenizer.ggml.bos_token_id", 1));
  c.eos_token_id = static_cast<int32_t>(int_or("tokenizer.ggml.eos_token_id", 2));
  c.attention_bias = c.architecture == "qwen2";
  c.validate(gguf.path());
  return c;
}

}  // namespace ember
