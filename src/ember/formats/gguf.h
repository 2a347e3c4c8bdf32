// GGUF v2/v3 reader: parses the header, every metadata value (scalars, strings, nested arrays) and
// the tensor directory of an mmap'd file, checking every count, length and offset against the file
// size. Tensor data stays in the mapping (zero-copy views).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ember/core/mapped_file.h"
#include "ember/core/tensor.h"

namespace ember {

enum class GgufType : uint32_t {
  Uint8 = 0,
  Int8 = 1,
  Uint16 = 2,
  Int16 = 3,
  Uint32 = 4,
  Int32 = 5,
  Float32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  Uint64 = 10,
  Int64 = 11,
  Float64 = 12,
};
const char* gguf_type_name(GgufType type);

struct GgufValue {
  GgufType type = GgufType::Uint8;
  GgufType array_type = GgufType::Uint8;  // element type when type == Array
  uint64_t uint_value = 0;                // Uint8/16/32/64, Bool (0/1)
  int64_t int_value = 0;                  // Int8/16/32/64
  double float_value = 0.0;               // Float32/64
  std::string string_value;               // String
  std::vector<GgufValue> array;           // Array (elements may themselves be arrays)

  bool is_integer() const;
  // Any integer type (or bool) as int64; nullopt for other types or uint64 values above INT64_MAX.
  std::optional<int64_t> as_int() const;
  // Any integer or float type as double; nullopt otherwise.
  std::optional<double> as_float() const;
  // Human-readable rendering for `ember inspect`; arrays show at most `max_items` elements.
  std::string to_display(size_t max_items = 8) const;
};

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;      // raw ggml type id as stored
  DType dtype = DType::F32;    // ember dtype (only F32/F16/BF16/Q8_0/Q4_0 are accepted)
  std::vector<int64_t> shape;  // row-major, outermost first (GGUF's ne[] reversed)
  uint64_t offset = 0;         // absolute byte offset of the data in the file
  uint64_t nbytes = 0;
};

class GgufFile {
 public:
  // Throws ember::Error naming the file (and key / tensor) for: missing file, bad magic, version
  // other than 2 or 3, absurd counts, truncated strings/arrays/tensor infos, unknown metadata type,
  // unsupported tensor type ("unsupported tensor type Q4_K for tensor blk.0.attn_q.weight"),
  // tensor data past the end of file, misaligned data.
  explicit GgufFile(const std::string& path);

  const std::string& path() const { return mapping_->path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  const GgufValue* find(const std::string& key) const;
  // Typed getters: throw ember::Error("<path>: metadata key '<key>' is missing" / "... has type
  // <t>, expected <u>") when absent or of the wrong kind.
  std::string get_string(const std::string& key) const;
  int64_t get_int(const std::string& key) const;
  double get_float(const std::string& key) const;
  const std::vector<GgufValue>& get_array(const std::string& key) const;

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(const std::string& name) const;
  TensorView view(const GgufTensorInfo& info) const;

  // The mapping, shared so weights viewing into it can keep it alive.
  std::shared_ptr<const MappedFile> mapping() const { return mapping_; }

 private:
  std::shared_ptr<const MappedFile> mapping_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufTensorInfo> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;  // name -> index into tensors_
};

// Name of a ggml tensor type id ("F32", "Q4_K", ...) or "type N" when unknown.
std::string ggml_type_name(uint32_t ggml_type);
// The ember dtype of a ggml type id (nullopt: a type ember does not read), and back.
std::optional<DType> dtype_for_ggml(uint32_t ggml_type);
uint32_t ggml_type_of(DType dtype);

}  // namespace ember
