// `ember quantize`'s engine: a model (GGUF, HF directory, llama2.c .bin) in, a GGUF file out with
// every tensor in the type its preset gives it. Tensors stream from the source mapping through a
// slab of converted rows to the file, so memory holds one slab, never the model twice. Rows are
// converted in parallel, each independently, so the output is the same byte for byte whatever the
// thread count. The file is written as OUT.tmp and renamed into place only when complete: a
// failure leaves nothing behind.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "ember/core/dtype.h"
#include "ember/model/quant_presets.h"

namespace ember {

struct QuantizeProgress {
  size_t index = 0;  // tensors finished so far (1..count)
  size_t count = 0;
  const std::string* name = nullptr;  // the tensor just finished
  DType type = DType::F32;
  uint64_t bytes_written = 0;  // file bytes so far
};

struct QuantizeOptions {
  std::string input;
  std::string output;
  QuantPreset preset = QuantPreset::Q8_0;
  std::string tokenizer_path;                              // llama2.c: tokenizer.bin override
  int threads = 0;                                         // 0: one per physical core
  std::function<void(const QuantizeProgress&)> on_tensor;  // after each tensor, if set
};

struct QuantizeSummary {
  std::string output;
  size_t n_tensors = 0;
  uint64_t file_bytes = 0;
  uint64_t tensor_bytes = 0;
  int64_t n_elements = 0;
  double seconds = 0.0;
  std::map<std::string, int> tensors_by_type;  // "Q4_K" -> count

  // Tensor bits per element over every tensor of the file.
  double bits_per_weight() const {
    return n_elements > 0 ? 8.0 * static_cast<double>(tensor_bytes) / n_elements : 0.0;
  }
};

// Throws ember::Error, leaving no output file, for: an unreadable or unknown input, an output
// directory that does not exist, an output that is the input, and a type this build cannot
// quantize to (kind Unsupported, naming the preset and the type).
QuantizeSummary quantize_model(const QuantizeOptions& options);

// Whether convert_row implements `dtype` in this build (f32/f16/bf16 and the quantized types
// whose quantizer exists).
bool can_quantize_to(DType dtype);

}  // namespace ember
