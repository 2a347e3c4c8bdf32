// What `ember quantize` will write, decided before a byte is written: every output tensor with its
// GGUF name, shape, source rows (any dtype, in the source file's mapping) and target type from the
// preset's rules, plus where the metadata comes from. A GGUF source keeps its tensors (all of
// them, in file order, rows as they are); an HF directory or llama2.c checkpoint is mapped onto
// llama.cpp's tensor names, with the Q/K rows of Llama models reordered into the interleaved-pair
// RoPE layout GGUF files use.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ember/core/dtype.h"
#include "ember/formats/gguf.h"
#include "ember/model/checkpoint.h"
#include "ember/model/quant_presets.h"

namespace ember {

struct PlannedTensor {
  std::string name;            // GGUF name
  std::vector<int64_t> shape;  // row-major
  DType source_dtype = DType::F32;
  const uint8_t* source = nullptr;  // rows of source_dtype
  DType target = DType::F32;
  // > 0: output row r of each head of this many rows comes from the source's half-rotation row
  // (r % 2) * head_dim / 2 + r / 2 (HF's Q/K layout -> GGUF's interleaved pairs).
  int64_t permute_head_dim = 0;

  int64_t cols() const { return shape.back(); }
  int64_t rows() const;
  int64_t numel() const { return rows() * cols(); }
  // Whether the rows can be copied byte for byte (same dtype, no reordering).
  bool is_copy() const { return target == source_dtype && permute_head_dim == 0; }
};

struct QuantizePlan {
  QuantPreset preset = QuantPreset::F16;
  std::vector<PlannedTensor> tensors;
  // Exactly one is set: the GGUF source (its metadata is carried over), or the checkpoint whose
  // config and tokenizer make the metadata.
  std::shared_ptr<const GgufFile> gguf;
  std::optional<Checkpoint> checkpoint;
  std::vector<std::shared_ptr<const MappedFile>> mappings;     // keep the sources mapped
  std::vector<std::shared_ptr<std::vector<float>>> generated;  // data made here (rope_freqs)
};

// Opens `input` (GGUF file, HF directory, llama2.c .bin; `tokenizer_path` overrides a llama2.c
// tokenizer) and plans every tensor. Throws ember::Error naming the input when it cannot be read,
// holds no weights, or has a tensor the GGUF output cannot describe.
QuantizePlan plan_quantization(const std::string& input, QuantPreset preset,
                               const std::string& tokenizer_path = "");

// The model facts the preset rules need, from a GGUF file's metadata (any architecture).
QuantModelShape quant_model_shape(const GgufFile& gguf);

}  // namespace ember
