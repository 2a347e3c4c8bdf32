// Test-only writers that produce small, valid GGUF and safetensors files byte by byte, so parser
// tests can build a file, corrupt one field of it, and check the error.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace ember::test {

using Bytes = std::vector<uint8_t>;

// Little-endian encoders shared by the writers and by tests that patch files.
void put_u32(Bytes& out, uint32_t v);
void put_u64(Bytes& out, uint64_t v);
void put_gguf_string(Bytes& out, const std::string& s);
void patch_u32(Bytes& bytes, size_t at, uint32_t v);
void patch_u64(Bytes& bytes, size_t at, uint64_t v);

void write_bytes(const std::filesystem::path& path, const Bytes& bytes);
Bytes read_bytes(const std::filesystem::path& path);

// Runs `f` and returns the message of the ember::Error it throws; records a test failure when it
// throws nothing or anything else.
std::string error_message(const std::function<void()>& f);

// Raw value-type ids of GGUF metadata (mirrors ember::GgufType, kept separate so the writer does
// not depend on the code under test).
namespace gguf_t {
inline constexpr uint32_t kU8 = 0, kI8 = 1, kU16 = 2, kI16 = 3, kU32 = 4, kI32 = 5, kF32 = 6,
                          kBool = 7, kString = 8, kArray = 9, kU64 = 10, kI64 = 11, kF64 = 12;
}

class GgufWriter {
 public:
  // `payload` is the encoded value (for arrays: element type, count, elements).
  void kv_raw(const std::string& key, uint32_t type, const Bytes& payload);
  void kv_u32(const std::string& key, uint32_t v);
  void kv_i32(const std::string& key, int32_t v);
  void kv_u64(const std::string& key, uint64_t v);
  void kv_f32(const std::string& key, float v);
  void kv_bool(const std::string& key, bool v);
  void kv_string(const std::string& key, const std::string& v);
  void kv_string_array(const std::string& key, const std::vector<std::string>& v);
  void kv_i32_array(const std::string& key, const std::vector<int32_t>& v);

  // `shape` is row-major (outermost first); the writer stores ne[] innermost first as GGUF does.
  // Tensors are laid out in order, each at the next multiple of the alignment.
  void tensor(const std::string& name, uint32_t ggml_type, const std::vector<int64_t>& shape,
              const Bytes& data);

  void set_alignment(uint64_t a) { alignment_ = a; }  // layout only; add the kv separately
  Bytes build(uint32_t version = 3);

  // Filled by build(): where each tensor's u64 relative-offset field is, and where data starts.
  std::vector<size_t> tensor_offset_fields;
  size_t data_start = 0;

 private:
  struct Kv {
    std::string key;
    uint32_t type;
    Bytes payload;
  };
  struct Tensor {
    std::string name;
    uint32_t type;
    std::vector<int64_t> shape;
    Bytes data;
  };
  std::vector<Kv> kvs_;
  std::vector<Tensor> tensors_;
  uint64_t alignment_ = 32;
};

class SafetensorsWriter {
 public:
  void metadata(const std::string& key, const std::string& value);
  void tensor(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape,
              const Bytes& data);
  // The JSON header text build() would write (tests may edit it and pass it to build_with_header).
  std::string header() const;
  Bytes build() const { return build_with_header(header()); }
  Bytes build_with_header(const std::string& header) const;

 private:
  struct Tensor {
    std::string name, dtype;
    std::vector<int64_t> shape;
    Bytes data;
  };
  std::vector<std::pair<std::string, std::string>> metadata_;
  std::vector<Tensor> tensors_;
};

// Bytes of `v` as little-endian float32 / f16 / bf16.
Bytes f32_bytes(const std::vector<float>& v);
Bytes f16_bytes(const std::vector<float>& v);
Bytes bf16_bytes(const std::vector<float>& v);

}  // namespace ember::test
