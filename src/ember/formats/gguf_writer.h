// GGUF v3 writer: metadata of every value type (scalars, strings, arrays, arrays of arrays), the
// tensor directory, and tensor data streamed to the file in order, so a model is never held in
// memory as a whole. The layout is the one gguf.cpp reads (see its header comment): each tensor's
// data starts at a multiple of general.alignment (32 when the key is absent) from the start of
// the data section, and the bytes between tensors are zero.
//
//   GgufWriter w;
//   w.set("general.architecture", gguf_value::string("llama"));
//   w.add_tensor("token_embd.weight", DType::Q8_0, {512, 256});
//   w.open("out.gguf");                  // header + metadata + directory
//   w.write_tensor_data(bytes, n);       // any number of calls per tensor, tensors in order
//   w.close();                           // checks every tensor got exactly its bytes
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "ember/core/dtype.h"
#include "ember/formats/gguf.h"

namespace ember {

// GgufValue constructors for the writer (the reader's struct is a plain tagged union).
namespace gguf_value {
GgufValue u8(uint8_t v);
GgufValue i8(int8_t v);
GgufValue u16(uint16_t v);
GgufValue i16(int16_t v);
GgufValue u32(uint32_t v);
GgufValue i32(int32_t v);
GgufValue u64(uint64_t v);
GgufValue i64(int64_t v);
GgufValue f32(float v);
GgufValue f64(double v);
GgufValue boolean(bool v);
GgufValue string(std::string v);
// An array of `element_type` values; every element must have that type.
GgufValue array(GgufType element_type, std::vector<GgufValue> elements);
GgufValue string_array(const std::vector<std::string>& v);
GgufValue i32_array(const std::vector<int32_t>& v);
GgufValue f32_array(const std::vector<float>& v);
}  // namespace gguf_value

struct GgufWriterTensor {
  std::string name;
  uint32_t ggml_type = 0;
  std::vector<int64_t> shape;  // row-major, outermost first (written as GGUF's ne[], reversed)
  uint64_t nbytes = 0;
};

class GgufWriter {
 public:
  GgufWriter() = default;
  ~GgufWriter();  // closes (without the checks of close()) a file left open by an exception
  GgufWriter(const GgufWriter&) = delete;
  GgufWriter& operator=(const GgufWriter&) = delete;

  // Replaces the value of `key` in place, or appends it.
  void set(const std::string& key, GgufValue value);
  // Removes `key`; false when it was not there.
  bool erase(const std::string& key);
  const GgufValue* find(const std::string& key) const;
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }

  // Tensors are written in the order they are added. The dtype form computes the byte size;
  // throws ember::Error when a row is not a whole number of the dtype's blocks.
  void add_tensor(const std::string& name, DType dtype, const std::vector<int64_t>& shape);
  void add_tensor(GgufWriterTensor tensor);
  const std::vector<GgufWriterTensor>& tensors() const { return tensors_; }

  // general.alignment when set (a positive power of two), else 32.
  uint64_t alignment() const;

  // Creates `path` and writes everything before the tensor data. Throws ember::Error naming the
  // path when it cannot be created or written, or when the metadata is malformed (an array
  // element of the wrong type, a duplicate tensor name, a bad alignment).
  void open(const std::string& path);
  // Appends `n` bytes to the data of the current tensor (the first whose bytes are not all
  // written); padding follows each tensor automatically. Throws ember::Error when the bytes run
  // past the last tensor.
  void write_tensor_data(const void* data, uint64_t n);
  // Index of the tensor the next bytes go to (tensors().size() once all are written).
  size_t current_tensor() const { return current_; }
  uint64_t bytes_written() const { return written_; }
  // Flushes and closes the file. Throws ember::Error when a tensor is short of bytes or the file
  // cannot be written.
  void close();

 private:
  void put(const void* data, uint64_t n);
  void pad_to_alignment();
  void advance_past_full_tensors();

  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<GgufWriterTensor> tensors_;
  std::string path_;
  std::FILE* file_ = nullptr;
  uint64_t alignment_ = 32;
  uint64_t written_ = 0;          // bytes written to the file so far
  size_t current_ = 0;            // tensor receiving data
  uint64_t current_written_ = 0;  // bytes of it written
};

}  // namespace ember
