#include "ember/model/model_loader.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "ember/core/error.h"
#include "ember/core/quantize.h"
#include "ember/formats/gguf.h"
#include "ember/model/tensor_names.h"
#include "ember/tokenizer/load_tokenizer.h"
#include "ember/tokenizer/tokenizer_json.h"

namespace ember {

namespace {

// Interleaved-pair RoPE layout -> HF half-rotation layout, per head of `head_dim` rows:
// HF row c*(head_dim/2) + i holds the interleaved row 2i + c (c = 0 real part, 1 imaginary).
int64_t interleaved_source_row(int64_t hf_row, int64_t head_dim) {
  int64_t head = hf_row / head_dim, j = hf_row % head_dim, half = head_dim / 2;
  int64_t c = j / half, i = j % half;
  return head * head_dim + 2 * i + c;
}

// Converts a [rows, cols] matrix into `target` row by row: fill(r, out) writes row r as f32 (in
// row order, so a sequential source such as the --dummy generator stays deterministic), then the
// rows are converted (quantized) on all cores, 64 rows at a time. Quantizing the K-quants costs
// ~100 ns per value: one thread would take minutes on a 7B model. Each row's bytes depend only on
// the row, so the thread count never changes the result.
template <typename Fill>
void convert_rows(int64_t rows, int64_t cols, DType target, int64_t row_bytes, uint8_t* out,
                  Fill fill) {
  constexpr int64_t kChunk = 64;
  const int n_threads = static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 32u));
  std::vector<float> chunk(static_cast<size_t>(kChunk * cols));
  for (int64_t r0 = 0; r0 < rows; r0 += kChunk) {
    const int64_t n = std::min(kChunk, rows - r0);
    for (int64_t i = 0; i < n; ++i) fill(r0 + i, chunk.data() + i * cols);
    auto convert = [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        convert_row(chunk.data() + i * cols, target, out + (r0 + i) * row_bytes, cols);
      }
    };
    const int workers = dtype_is_quantized(target) ? std::min<int64_t>(n_threads, n) : 1;
    std::vector<std::thread> threads;
    std::exception_ptr failure;
    std::mutex failure_mutex;
    for (int w = 1; w < workers; ++w) {
      threads.emplace_back([&, w] {
        try {
          convert(n * w / workers, n * (w + 1) / workers);
        } catch (...) {
          std::lock_guard<std::mutex> lock(failure_mutex);
          failure = std::current_exception();
        }
      });
    }
    try {
      convert(0, n / workers);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      failure = std::current_exception();
    }
    for (auto& t : threads) t.join();
    if (failure) std::rethrow_exception(failure);
  }
}

// splitmix64: a tiny, fast, well-mixed generator for --dummy weights.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  // Uniform in [-1, 1).
  float uniform() {
    return static_cast<float>(static_cast<double>(next() >> 11) * 0x1.0p-52 - 1.0);
  }
};

uint64_t hash_name(const std::string& s, uint64_t seed) {
  uint64_t h = 1469598103934665603ull ^ seed;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

class WeightBuilder {
 public:
  WeightBuilder(const Checkpoint& ckpt, std::optional<DType> dtype, uint64_t seed, Backend& backend,
                bool check_all_rows)
      : ckpt_(ckpt),
        dtype_(dtype),
        seed_(seed),
        backend_(backend),
        check_all_rows_(check_all_rows) {}

  bool has(const std::string& name) const { return ckpt_.tensors.count(name) != 0; }

  const StoredTensor& find(const ExpectedTensor& expected) {
    auto it = ckpt_.tensors.find(expected.name);
    if (it == ckpt_.tensors.end()) {
      const std::string& arch = ckpt_.config.architecture;
      const std::string stored =
          ckpt_.format == CheckpointFormat::Gguf
              ? gguf_name_from_hf(expected.name, arch).value_or(expected.name)
              : hf_from_canonical(expected.name, arch);
      throw Error(ckpt_.path + ": missing tensor " + stored + " (" + arch + ")");
    }
    const TensorView& v = it->second.view;
    std::vector<int64_t> shape = v.shape;
    // Vectors may be stored as [n] or [1, n], and so may one-row matrices (Qwen2-MoE's shared
    // expert gate); other matrices must match exactly.
    if (!expected.is_matrix && shape.size() == 2 && shape[0] == 1) shape.erase(shape.begin());
    if (expected.is_matrix && expected.shape.size() == 2 && expected.shape[0] == 1 &&
        shape.size() == 1) {
      shape.insert(shape.begin(), 1);
    }
    if (shape != expected.shape) {
      throw Error(ckpt_.path + ": tensor " + it->second.stored_name + " has shape " +
                  shape_to_string(v.shape) + ", expected " + shape_to_string(expected.shape));
    }
    return it->second;
  }

  // Rows [row_begin, row_begin + n_rows) of the matrix `expected` (all of it when n_rows < 0):
  // fused Q/K/V and gate/up tensors are split this way, and a 3-D [n, rows, cols] tensor (the
  // experts of a projection) is read as [n * rows, cols].
  WeightMatrix matrix(const ExpectedTensor& expected, bool permute_qk, int64_t head_dim,
                      int64_t row_begin = 0, int64_t n_rows = -1, const std::string& part = "") {
    const int64_t cols = expected.shape.back();
    int64_t all_rows = 1;
    for (size_t i = 0; i + 1 < expected.shape.size(); ++i) all_rows *= expected.shape[i];
    const int64_t rows = n_rows < 0 ? all_rows : n_rows;
    if (ckpt_.format == CheckpointFormat::ConfigOnly) {
      return random_matrix({expected.name + part, {rows, cols}, true});
    }
    const StoredTensor& stored = find(expected);
    const TensorView& src = stored.view;
    if (!stored.transposed) check_rows(stored, row_begin, rows, cols);
    DType target = dtype_.value_or(src.dtype);
    // Quantized blocks span 32 or 256 inputs; a matrix whose rows do not fit (e.g. stories260K's
    // d_ffn = 172) takes llama.cpp's fallback type, or stays in its float dtype.
    target =
        dtype_fitting_row(target, cols, dtype_is_quantized(src.dtype) ? DType::F32 : src.dtype);
    if (stored.transposed) return transposed_matrix(stored, target, row_begin, rows);
    const int64_t src_row_bytes = dtype_row_bytes(src.dtype, cols);
    const uint8_t* first = src.data + row_begin * src_row_bytes;
    const WeightMatrix source{src.dtype, first, rows, cols, src_row_bytes};
    const bool permute = permute_qk && ckpt_.qk_rows_interleaved;
    if (target == src.dtype && !permute) {
      const WeightMatrix out = backend_.upload_matrix(source, /*host_is_file=*/true);
      if (out.data != source.data) release_source(source);
      return out;
    }
    // Converted and/or permuted on the host, then handed to the backend.
    WeightMatrix host{target, nullptr, rows, cols, dtype_row_bytes(target, cols)};
    std::vector<uint8_t> bytes(static_cast<size_t>(host.bytes()));
    host.data = bytes.data();
    auto source_row = [&](int64_t r) {
      return first + (permute ? interleaved_source_row(r, head_dim) : r) * source.row_bytes;
    };
    if (target == src.dtype) {
      for (int64_t r = 0; r < rows; ++r) {
        std::memcpy(bytes.data() + r * host.row_bytes, source_row(r),
                    static_cast<size_t>(host.row_bytes));
      }
    } else {
      convert_rows(rows, cols, target, host.row_bytes, bytes.data(), [&](int64_t r, float* out) {
        dequantize_row(src.dtype, source_row(r), out, cols);
      });
    }
    release_source(source);
    return backend_.upload_matrix(host, /*host_is_file=*/false);
  }

  // A matrix kept in float32 whatever the load dtype (the MoE router, as llama.cpp keeps it: its
  // probabilities decide which experts run).
  WeightMatrix f32_matrix(const ExpectedTensor& expected) {
    const std::optional<DType> saved = dtype_;
    dtype_ = DType::F32;
    WeightMatrix m = matrix(expected, false, 0);
    dtype_ = saved;
    return m;
  }

  // Elements [begin, begin + n) of the vector `expected` (all of it when n < 0), plus `offset`
  // (HF Gemma's norms apply 1 + w). --dummy: norms (dummy_value 1) are 1, biases small noise.
  const float* vector(const ExpectedTensor& expected, float dummy_value, float offset = 0.0f,
                      int64_t begin = 0, int64_t n = -1) {
    if (n < 0) n = expected.shape[0];
    std::vector<float> host(static_cast<size_t>(n));
    if (ckpt_.format == CheckpointFormat::ConfigOnly) {
      // A split part of a fused vector gets its own seed (appending avoids GCC 12's false
      // -Wrestrict on `"#" + std::to_string(...)`).
      std::string name = expected.name;
      if (begin != 0) name.append("#").append(std::to_string(begin));
      SplitMix64 rng{hash_name(name, seed_)};
      for (auto& v : host) v = dummy_value == 0 ? 0.02f * rng.uniform() : dummy_value;
    } else {
      const StoredTensor& stored = find(expected);
      const TensorView& src = stored.view;
      std::vector<float> all(static_cast<size_t>(expected.shape[0]));
      dequantize_row(src.dtype, src.data, all.data(), expected.shape[0]);
      check_finite(stored.stored_name, all.data(), expected.shape[0]);
      for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = all[begin + i] + offset;
    }
    return backend_.upload_vector(host.data(), n);
  }

  // Tensors holding NaN or Inf, by their stored names: vectors (norms, biases) are checked
  // fully, matrices on kSampledRows rows spread over them (a full scan would read every weight
  // at load; a broken conversion shows in any row).
  const std::vector<std::string>& non_finite() const { return non_finite_; }

 private:
  static constexpr int64_t kSampledRows = 8;

  void check_finite(const std::string& name, const float* v, int64_t n) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(v[i])) {
        if (std::find(non_finite_.begin(), non_finite_.end(), name) == non_finite_.end())
          non_finite_.push_back(name);
        return;
      }
    }
  }

  void check_rows(const StoredTensor& stored, int64_t row_begin, int64_t rows, int64_t cols) {
    const TensorView& src = stored.view;
    const int64_t row_bytes = dtype_row_bytes(src.dtype, cols);
    const int64_t n = check_all_rows_ ? rows : std::min(rows, kSampledRows);
    std::vector<float> row(static_cast<size_t>(cols));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t r = row_begin + (n == 1 ? 0 : i * (rows - 1) / (n - 1));
      dequantize_row(src.dtype, src.data + r * row_bytes, row.data(), cols);
      check_finite(stored.stored_name, row.data(), cols);
    }
  }

  // Rows [row_begin, row_begin + rows) of a matrix stored transposed (GPT-2's Conv1D [in, out]).
  WeightMatrix transposed_matrix(const StoredTensor& stored, DType target, int64_t row_begin,
                                 int64_t rows) {
    const TensorView& src = stored.view;
    const int64_t out_features = src.shape[0], in_features = src.shape[1];
    std::vector<float> stored_f32(static_cast<size_t>(out_features * in_features));
    // The file's [in, out] rows are `out_features` long.
    for (int64_t i = 0; i < in_features; ++i) {
      const int64_t row_bytes = dtype_row_bytes(src.dtype, out_features);
      dequantize_row(src.dtype, src.data + i * row_bytes, stored_f32.data() + i * out_features,
                     out_features);
    }
    if (row_begin == 0) {  // a fused tensor is split in parts: check it once
      check_finite(stored.stored_name, stored_f32.data(), static_cast<int64_t>(stored_f32.size()));
    }
    WeightMatrix host{target, nullptr, rows, in_features, dtype_row_bytes(target, in_features)};
    std::vector<uint8_t> bytes(static_cast<size_t>(host.bytes()));
    host.data = bytes.data();
    convert_rows(rows, in_features, target, host.row_bytes, bytes.data(),
                 [&](int64_t r, float* out) {
                   for (int64_t i = 0; i < in_features; ++i) {
                     out[i] = stored_f32[static_cast<size_t>(i * out_features + row_begin + r)];
                   }
                 });
    return backend_.upload_matrix(host, /*host_is_file=*/false);
  }

  WeightMatrix random_matrix(const ExpectedTensor& expected) {
    const int64_t rows = expected.shape[0], cols = expected.shape[1];
    DType target = dtype_.value_or(DType::BF16);
    target = dtype_fitting_row(target, cols, DType::BF16);
    WeightMatrix host{target, nullptr, rows, cols, dtype_row_bytes(target, cols)};
    std::vector<uint8_t> bytes(static_cast<size_t>(host.bytes()));
    host.data = bytes.data();
    // Uniform with the standard deviation HF initialises Llama with (0.02): sqrt(3) * 0.02.
    const float amplitude = 0.02f * std::sqrt(3.0f);
    const uint64_t base = hash_name(expected.name, seed_);
    // One stream of draws through the matrix, row after row; row r starts r * cols draws in
    // (splitmix64 jumps ahead by adding to its state), so threads fill rows independently and an
    // 8B-shaped model is ready in seconds rather than minutes.
    const int n_threads =
        static_cast<int>(std::clamp(std::thread::hardware_concurrency(), 1u, 32u));
    auto fill = [&](int64_t begin, int64_t end) {
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = begin; r < end; ++r) {
        SplitMix64 rng{base + static_cast<uint64_t>(r * cols) * 0x9E3779B97F4A7C15ull};
        for (int64_t c = 0; c < cols; ++c) row[static_cast<size_t>(c)] = amplitude * rng.uniform();
        convert_row(row.data(), target, bytes.data() + r * host.row_bytes, cols);
      }
    };
    const int workers =
        static_cast<int>(std::min<int64_t>(n_threads, std::max<int64_t>(rows / 64, 1)));
    std::vector<std::thread> threads;
    std::exception_ptr failure;
    std::mutex failure_mutex;
    auto guarded = [&](int64_t begin, int64_t end) {
      try {
        fill(begin, end);
      } catch (...) {
        std::lock_guard<std::mutex> lock(failure_mutex);
        failure = std::current_exception();
      }
    };
    for (int w = 1; w < workers; ++w) {
      threads.emplace_back(guarded, rows * w / workers, rows * (w + 1) / workers);
    }
    guarded(0, rows / workers);
    for (auto& t : threads) t.join();
    if (failure) std::rethrow_exception(failure);
    return backend_.upload_matrix(host, /*host_is_file=*/false);
  }

  // A matrix copied out of the file (converted, re-laid out) is not read from the mapping again:
  // drop its pages there so the process does not hold the model twice.
  void release_source(const WeightMatrix& source) {
    const auto bytes = static_cast<size_t>(source.bytes());
    for (const auto& mapping : ckpt_.mappings) {
      if (mapping->release_pages(source.data, bytes)) return;
    }
  }

  const Checkpoint& ckpt_;
  std::optional<DType> dtype_;
  uint64_t seed_;
  Backend& backend_;
  bool check_all_rows_;
  std::vector<std::string> non_finite_;
};

}  // namespace

namespace {

// A mixture-of-experts MLP: the router and the shared expert gate in f32, each expert's matrices
// cut out of its projection's [E, rows, cols] tensor, the shared expert in w_gate/w_up/w_down.
template <typename Find>
void build_experts(WeightBuilder& b, const ModelConfig& c, Find t, LayerWeights& lw) {
  const int64_t E = c.n_experts, F = c.d_expert_ffn, D = c.d_model;
  lw.router = b.f32_matrix(t("mlp.gate.weight"));
  const ExpectedTensor& gate = t("mlp.experts.gate_proj.weight");
  const ExpectedTensor& up = t("mlp.experts.up_proj.weight");
  const ExpectedTensor& down = t("mlp.experts.down_proj.weight");
  // HF checkpoints store each expert apart (mlp.experts.E.gate_proj.weight); GGUF one tensor per
  // projection, whose rows are cut per expert.
  const std::string layer = gate.name.substr(0, gate.name.size() - 28);  // "model.layers.N."
  const bool per_expert = b.has(layer + "mlp.experts.0.gate_proj.weight");
  for (int64_t e = 0; e < E; ++e) {
    std::string part = "#";  // appended: GCC 12 warns falsely on "#" + std::to_string(e)
    part += std::to_string(e);
    if (per_expert) {
      const std::string p = layer + "mlp.experts." + std::to_string(e) + ".";
      lw.expert_gate.push_back(b.matrix({p + "gate_proj.weight", {F, D}, true}, false, 0));
      lw.expert_up.push_back(b.matrix({p + "up_proj.weight", {F, D}, true}, false, 0));
      lw.expert_down.push_back(b.matrix({p + "down_proj.weight", {D, F}, true}, false, 0));
      continue;
    }
    lw.expert_gate.push_back(b.matrix(gate, false, 0, e * F, F, part));
    lw.expert_up.push_back(b.matrix(up, false, 0, e * F, F, part));
    lw.expert_down.push_back(b.matrix(down, false, 0, e * D, D, part));
  }
  if (c.d_shared_expert_ffn > 0) {
    lw.w_gate = b.matrix(t("mlp.shared_expert.gate_proj.weight"), false, 0);
    lw.w_up = b.matrix(t("mlp.shared_expert.up_proj.weight"), false, 0);
    lw.w_down = b.matrix(t("mlp.shared_expert.down_proj.weight"), false, 0);
    lw.shared_expert_gate = b.f32_matrix(t("mlp.shared_expert_gate.weight"));
  }
}

// One layer's tensors, by canonical name (tensor_names.h), as the config says the family has them.
void build_layer(WeightBuilder& b, const ModelConfig& c, const std::string& p,
                 const std::map<std::string, const ExpectedTensor*>& expected, LayerWeights& lw) {
  auto t = [&](const std::string& suffix) -> const ExpectedTensor& {
    return *expected.at(p + suffix);
  };
  const float norm_offset = c.norm_weight_offset ? 1.0f : 0.0f;
  const bool layer_norm = c.norm == NormKind::Layer;
  const int64_t hd = c.head_dim, q = c.q_dim(), kv = c.kv_dim();
  lw.attn_norm = b.vector(t("input_layernorm.weight"), 1.0f, norm_offset);
  if (layer_norm) lw.attn_norm_bias = b.vector(t("input_layernorm.bias"), 0.0f);
  if (c.fused_qkv) {
    // [q; k; v] rows.
    const ExpectedTensor& qkv = t("self_attn.qkv_proj.weight");
    lw.wq = b.matrix(qkv, true, hd, 0, q, "#q");
    lw.wk = b.matrix(qkv, true, hd, q, kv, "#k");
    lw.wv = b.matrix(qkv, false, hd, q + kv, kv, "#v");
    if (c.attention_bias) {
      const ExpectedTensor& bias = t("self_attn.qkv_proj.bias");
      lw.bq = b.vector(bias, 0.0f, 0.0f, 0, q);
      lw.bk = b.vector(bias, 0.0f, 0.0f, q, kv);
      lw.bv = b.vector(bias, 0.0f, 0.0f, q + kv, kv);
    }
  } else {
    lw.wq = b.matrix(t("self_attn.q_proj.weight"), true, hd);
    lw.wk = b.matrix(t("self_attn.k_proj.weight"), true, hd);
    lw.wv = b.matrix(t("self_attn.v_proj.weight"), false, hd);
    if (c.attention_bias) {
      lw.bq = b.vector(t("self_attn.q_proj.bias"), 0.0f);
      lw.bk = b.vector(t("self_attn.k_proj.bias"), 0.0f);
      lw.bv = b.vector(t("self_attn.v_proj.bias"), 0.0f);
    }
  }
  if (c.qk_norm || c.qk_norm_whole) {
    lw.q_norm = b.vector(t("self_attn.q_norm.weight"), 1.0f, norm_offset);
    lw.k_norm = b.vector(t("self_attn.k_norm.weight"), 1.0f, norm_offset);
  }
  lw.wo = b.matrix(t("self_attn.o_proj.weight"), false, hd);
  if (c.linear_biases) lw.bo = b.vector(t("self_attn.o_proj.bias"), 0.0f);
  if (c.sandwich_norms) {
    lw.attn_out_norm = b.vector(t("self_attn.output_norm.weight"), 1.0f, norm_offset);
  }
  lw.ffn_norm = b.vector(t("post_attention_layernorm.weight"), 1.0f, norm_offset);
  if (layer_norm) lw.ffn_norm_bias = b.vector(t("post_attention_layernorm.bias"), 0.0f);
  if (c.is_moe()) {
    build_experts(b, c, t, lw);
  } else if (c.fused_gate_up) {
    // [gate; up] rows.
    const ExpectedTensor& gate_up = t("mlp.gate_up_proj.weight");
    lw.w_gate = b.matrix(gate_up, false, hd, 0, c.d_ffn, "#gate");
    lw.w_up = b.matrix(gate_up, false, hd, c.d_ffn, c.d_ffn, "#up");
  } else {
    if (c.mlp != MlpKind::Gelu) lw.w_gate = b.matrix(t("mlp.gate_proj.weight"), false, hd);
    lw.w_up = b.matrix(t("mlp.up_proj.weight"), false, hd);
  }
  if (c.linear_biases) lw.b_up = b.vector(t("mlp.up_proj.bias"), 0.0f);
  if (!c.is_moe()) lw.w_down = b.matrix(t("mlp.down_proj.weight"), false, hd);
  if (c.linear_biases) lw.b_down = b.vector(t("mlp.down_proj.bias"), 0.0f);
  if (c.sandwich_norms) {
    lw.ffn_out_norm = b.vector(t("mlp.output_norm.weight"), 1.0f, norm_offset);
  }
}

}  // namespace

ModelWeights build_weights(const Checkpoint& ckpt, std::optional<DType> dtype, uint64_t dummy_seed,
                           std::shared_ptr<Backend> backend, bool check_all_weights) {
  ModelWeights w;
  w.backend = std::move(backend);
  w.config = ckpt.config;
  w.mappings = ckpt.mappings;
  w.owned_tensors = ckpt.owned_tensors;
  const ModelConfig& c = w.config;
  if (!dtype && ckpt.format == CheckpointFormat::ConfigOnly) {
    dtype = ckpt.torch_dtype == "float32"   ? DType::F32
            : ckpt.torch_dtype == "float16" ? DType::F16
                                            : DType::BF16;
  }
  if (c.attention_bias && ckpt.qk_rows_interleaved) {
    throw Error(ckpt.path + ": attention biases with interleaved Q/K rows are not supported");
  }
  WeightBuilder b(ckpt, dtype, dummy_seed, *w.backend, check_all_weights);
  const std::vector<ExpectedTensor> expected_list = expected_tensors(c);
  std::map<std::string, const ExpectedTensor*> expected;
  for (const auto& e : expected_list) expected[e.name] = &e;
  const float norm_offset = c.norm_weight_offset ? 1.0f : 0.0f;

  w.embed = b.matrix(*expected.at("model.embed_tokens.weight"), false, c.head_dim);
  if (c.learned_positions) {
    w.positions = b.matrix(*expected.at("model.embed_positions.weight"), false, c.head_dim);
  }
  std::vector<float> inv_freq = rope_inverse_frequencies(c);
  if (!ckpt.rope_freq_factors.empty()) {
    for (size_t k = 0; k < inv_freq.size(); ++k) inv_freq[k] /= ckpt.rope_freq_factors[k];
  }
  w.rope_inv_freq =
      w.backend->upload_vector(inv_freq.data(), static_cast<int64_t>(inv_freq.size()));
  const float* local_inv_freq = w.rope_inv_freq;
  if (c.rope_local_theta > 0.0f) {
    const std::vector<float> local = rope_inverse_frequencies(c, /*local=*/true);
    local_inv_freq = w.backend->upload_vector(local.data(), static_cast<int64_t>(local.size()));
  }
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (int64_t l = 0; l < c.n_layers; ++l) {
    LayerWeights& lw = w.layers[static_cast<size_t>(l)];
    build_layer(b, c, "model.layers." + std::to_string(l) + ".", expected, lw);
    lw.window = c.layer_window(l);
    lw.rope_inv_freq = lw.window > 0 ? local_inv_freq : w.rope_inv_freq;
  }
  w.final_norm = b.vector(*expected.at("model.norm.weight"), 1.0f, norm_offset);
  if (c.norm == NormKind::Layer)
    w.final_norm_bias = b.vector(*expected.at("model.norm.bias"), 0.0f);
  w.lm_head =
      c.tie_word_embeddings ? w.embed : b.matrix(*expected.at("lm_head.weight"), false, c.head_dim);
  w.non_finite_tensors = b.non_finite();
  return w;
}

std::unique_ptr<Tokenizer> load_checkpoint_tokenizer(const Checkpoint& ckpt) {
  if (ckpt.format == CheckpointFormat::Gguf) return load_tokenizer_from_gguf(*ckpt.gguf);
  if (ckpt.format == CheckpointFormat::Llama2c) {
    if (ckpt.tokenizer_path.empty()) {
      throw Error(ckpt.path +
                  ": no tokenizer found beside the model (tokenizer.bin or tok*.bin); "
                  "pass --tokenizer PATH");
    }
    return load_llama2c_tokenizer(ckpt.tokenizer_path,
                                  static_cast<int32_t>(ckpt.config.vocab_size));
  }
  if (ckpt.tokenizer_path.empty()) {
    throw Error(ckpt.path + ": no tokenizer.json beside the model (pass --tokenizer PATH)");
  }
  return load_tokenizer_json(ckpt.tokenizer_path);
}

namespace {

// FNV-1a 64 over the config's shape, each stored tensor's name, dtype, shape and up to 4 KiB from
// each end of its bytes (a fine-tune of the same shape differs there), the dummy seed, and the
// dtype the matrices were loaded as. Reads a few pages per tensor, not the file.
uint64_t weights_fingerprint(const Checkpoint& ckpt, const LoadOptions& options) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&](const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    for (size_t i = 0; i < n; ++i) {
      h ^= b[i];
      h *= 0x100000001b3ull;
    }
  };
  const ModelConfig& c = ckpt.config;
  const int64_t shape[] = {c.n_layers,   c.d_model,  c.n_heads,
                           c.n_kv_heads, c.head_dim, c.vocab_size};
  mix(shape, sizeof shape);
  mix(c.architecture.data(), c.architecture.size());
  const int64_t load[] = {options.dtype ? static_cast<int64_t>(*options.dtype) : -1,
                          options.dummy ? static_cast<int64_t>(options.dummy_seed) : -1};
  mix(load, sizeof load);
  for (const StoredTensor& t : ckpt.all_tensors) {
    mix(t.stored_name.data(), t.stored_name.size());
    mix(&t.view.dtype, sizeof t.view.dtype);
    mix(t.view.shape.data(), t.view.shape.size() * sizeof(int64_t));
    if (t.view.data == nullptr) continue;
    const size_t n = static_cast<size_t>(t.view.nbytes), edge = std::min<size_t>(n, 4096);
    mix(t.view.data, edge);
    mix(t.view.data + (n - edge), edge);
  }
  return h;
}

}  // namespace

LoadedModel load_model(const LoadOptions& options) {
  auto start = std::chrono::steady_clock::now();
  LoadedModel m;
  CheckpointOptions copts;
  copts.dummy = options.dummy;
  copts.tokenizer_path = options.tokenizer_path;
  m.checkpoint = open_checkpoint(options.path, copts);
  const uint64_t fingerprint = weights_fingerprint(m.checkpoint, options);
  if (options.adapt_checkpoint) options.adapt_checkpoint(m.checkpoint);
  m.weights =
      build_weights(m.checkpoint, options.dtype, options.dummy_seed,
                    options.shared_backend ? options.shared_backend : make_backend(options.backend),
                    options.check_weights);
  m.weights.fingerprint = fingerprint;
  if (!m.weights.non_finite_tensors.empty()) {
    std::string names;
    for (const std::string& n : m.weights.non_finite_tensors)
      names.append(names.empty() ? "" : ", ").append(n);
    std::fprintf(
        stderr,
        "warning: %s: NaN or Inf values in %s (%s); the model's output will not be meaningful\n",
        m.checkpoint.path.c_str(), names.c_str(),
        options.check_weights ? "every value checked"
                              : "norms and biases checked fully, matrices on a sample of rows; "
                                "--check-weights scans every value");
  }
  if (options.load_tokenizer) m.tokenizer = load_checkpoint_tokenizer(m.checkpoint);
  m.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return m;
}

}  // namespace ember
