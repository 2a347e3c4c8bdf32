#include "ember/model/checkpoint.h"

#include <filesystem>
#include <fstream>
#include <utility>

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
                const std::optional<std::string>& hf_name, bool transposed = false) {
  StoredTensor stored{stored_name, view, transposed};
  if (transposed && view.shape.size() == 2) std::swap(stored.view.shape[0], stored.view.shape[1]);
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
  const std::string& arch = ckpt.config.architecture;
  for (auto& [name, view] : hf.tensors) {
    add_tensor(ckpt, name, view, canonical_from_hf(name, arch),
               hf_weight_is_transposed(name, arch));
  }
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
  ModelConfig& c = ckpt.config;
  auto read_factors = [&](const TensorView& view, const std::string& name) {
    if (view.dtype != DType::F32 || view.numel() != c.rope_dim / 2) {
      throw Error(path.string() + ": tensor " + name + " must be f32 [rope_dim/2]");
    }
    const float* f = reinterpret_cast<const float*>(view.data);
    return std::vector<float>(f, f + view.numel());
  };
  for (const auto& info : gguf->tensors()) {
    TensorView view = gguf->view(info);
    if (info.name == "rope_freqs.weight") ckpt.rope_freq_factors = read_factors(view, info.name);
    if (info.name == "rope_factors_long.weight") {
      c.rope_long_factors = read_factors(view, info.name);
      c.rope_scaling = RopeScaling::LongRope;
    }
    if (info.name == "rope_factors_short.weight") {
      c.rope_short_factors = read_factors(view, info.name);
    }
    add_tensor(ckpt, info.name, view, hf_name_from_gguf(info.name, c.architecture));
  }
  const auto has = [&](const char* name) { return ckpt.tensors.count(name) != 0; };
  c.tie_word_embeddings = !has("lm_head.weight");
  c.attention_bias =
      has("model.layers.0.self_attn.q_proj.bias") || has("model.layers.0.self_attn.qkv_proj.bias");
  // llama.cpp writes Phi-3's Q/K/V fused, but separate ones load too.
  if (c.fused_qkv && has("model.layers.0.self_attn.q_proj.weight")) c.fused_qkv = false;
  ckpt.qk_rows_interleaved = c.architecture == "llama";
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

}  // namespace ember
