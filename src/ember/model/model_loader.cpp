#include "ember/model/model_loader.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
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
  WeightBuilder(const Checkpoint& ckpt, std::optional<DType> dtype, uint64_t seed, Backend& backend)
      : ckpt_(ckpt), dtype_(dtype), seed_(seed), backend_(backend) {}

  const StoredTensor& find(const ExpectedTensor& expected) {
    auto it = ckpt_.tensors.find(expected.name);
    if (it == ckpt_.tensors.end()) {
      throw Error(ckpt_.path + ": missing tensor " + expected.name);
    }
    const TensorView& v = it->second.view;
    std::vector<int64_t> shape = v.shape;
    // Vectors may be stored as [n] or [1, n]; matrices must match exactly.
    if (!expected.is_matrix && shape.size() == 2 && shape[0] == 1) shape.erase(shape.begin());
    if (shape != expected.shape) {
      throw Error(ckpt_.path + ": tensor " + it->second.stored_name + " has shape " +
                  shape_to_string(v.shape) + ", expected " + shape_to_string(expected.shape));
    }
    return it->second;
  }

  WeightMatrix matrix(const ExpectedTensor& expected, bool permute_qk, int64_t head_dim) {
    const int64_t rows = expected.shape[0], cols = expected.shape[1];
    if (ckpt_.format == CheckpointFormat::ConfigOnly) return random_matrix(expected);
    const TensorView& src = find(expected).view;
    DType target = dtype_.value_or(src.dtype);
    // Quantized blocks span 32 or 256 inputs; a matrix whose rows do not fit (e.g. stories260K's
    // d_ffn = 172) takes llama.cpp's fallback type, or stays in its float dtype.
    target =
        dtype_fitting_row(target, cols, dtype_is_quantized(src.dtype) ? DType::F32 : src.dtype);
    const WeightMatrix source{src.dtype, src.data, rows, cols, dtype_row_bytes(src.dtype, cols)};
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
      return src.data + (permute ? interleaved_source_row(r, head_dim) : r) * source.row_bytes;
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

  const float* vector(const ExpectedTensor& expected, float dummy_value) {
    const int64_t n = expected.shape[0];
    std::vector<float> host(static_cast<size_t>(n));
    if (ckpt_.format == CheckpointFormat::ConfigOnly) {
      SplitMix64 rng{hash_name(expected.name, seed_)};
      // Norm weights are exactly `dummy_value` (1); biases get small noise around 0.
      for (auto& v : host) v = dummy_value == 0 ? 0.02f * rng.uniform() : dummy_value;
    } else {
      const TensorView& src = find(expected).view;
      dequantize_row(src.dtype, src.data, host.data(), n);
    }
    return backend_.upload_vector(host.data(), n);
  }

 private:
  WeightMatrix random_matrix(const ExpectedTensor& expected) {
    const int64_t rows = expected.shape[0], cols = expected.shape[1];
    DType target = dtype_.value_or(DType::BF16);
    target = dtype_fitting_row(target, cols, DType::BF16);
    WeightMatrix host{target, nullptr, rows, cols, dtype_row_bytes(target, cols)};
    std::vector<uint8_t> bytes(static_cast<size_t>(host.bytes()));
    host.data = bytes.data();
    // Uniform with the standard deviation HF initialises Llama with (0.02): sqrt(3) * 0.02.
    const float amplitude = 0.02f * std::sqrt(3.0f);
    SplitMix64 rng{hash_name(expected.name, seed_)};
    convert_rows(rows, cols, target, host.row_bytes, bytes.data(), [&](int64_t, float* out) {
      for (int64_t c = 0; c < cols; ++c) out[c] = amplitude * rng.uniform();
    });
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
};

}  // namespace

ModelWeights build_weights(const Checkpoint& ckpt, std::optional<DType> dtype, uint64_t dummy_seed,
                           std::shared_ptr<Backend> backend) {
  ModelWeights w;
  w.backend = std::move(backend);
  w.config = ckpt.config;
  w.mappings = ckpt.mappings;
  const ModelConfig& c = w.config;
  if (!dtype && ckpt.format == CheckpointFormat::ConfigOnly) {
    dtype = ckpt.torch_dtype == "float32"   ? DType::F32
            : ckpt.torch_dtype == "float16" ? DType::F16
                                            : DType::BF16;
  }
  WeightBuilder b(ckpt, dtype, dummy_seed, *w.backend);
  std::vector<ExpectedTensor> expected = expected_tensors(c);
  size_t i = 0;
  auto next = [&]() -> const ExpectedTensor& { return expected.at(i++); };
  w.embed = b.matrix(next(), false, c.head_dim);
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (auto& layer : w.layers) {
    layer.attn_norm = b.vector(next(), 1.0f);
    layer.wq = b.matrix(next(), true, c.head_dim);
    layer.wk = b.matrix(next(), true, c.head_dim);
    layer.wv = b.matrix(next(), false, c.head_dim);
    if (c.attention_bias) {
      layer.bq = b.vector(next(), 0.0f);
      layer.bk = b.vector(next(), 0.0f);
      layer.bv = b.vector(next(), 0.0f);
    }
    layer.wo = b.matrix(next(), false, c.head_dim);
    layer.ffn_norm = b.vector(next(), 1.0f);
    layer.w_gate = b.matrix(next(), false, c.head_dim);
    layer.w_up = b.matrix(next(), false, c.head_dim);
    layer.w_down = b.matrix(next(), false, c.head_dim);
  }
  w.final_norm = b.vector(next(), 1.0f);
  w.lm_head = c.tie_word_embeddings ? w.embed : b.matrix(next(), false, c.head_dim);
  if (c.attention_bias && ckpt.qk_rows_interleaved) {
    throw Error(ckpt.path + ": attention biases with interleaved Q/K rows are not supported");
  }
  std::vector<float> inv_freq = rope_inverse_frequencies(c);
  if (!ckpt.rope_freq_factors.empty()) {
    for (size_t k = 0; k < inv_freq.size(); ++k) inv_freq[k] /= ckpt.rope_freq_factors[k];
  }
  w.rope_inv_freq =
      w.backend->upload_vector(inv_freq.data(), static_cast<int64_t>(inv_freq.size()));
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

LoadedModel load_model(const LoadOptions& options) {
  auto start = std::chrono::steady_clock::now();
  LoadedModel m;
  CheckpointOptions copts;
  copts.dummy = options.dummy;
  copts.tokenizer_path = options.tokenizer_path;
  m.checkpoint = open_checkpoint(options.path, copts);
  m.weights =
      build_weights(m.checkpoint, options.dtype, options.dummy_seed, make_backend(options.backend));
  if (options.load_tokenizer) m.tokenizer = load_checkpoint_tokenizer(m.checkpoint);
  m.load_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return m;
}

}  // namespace ember
