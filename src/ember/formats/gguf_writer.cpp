#include "ember/formats/gguf_writer.h"

#include <cerrno>
#include <cstring>
#include <unordered_set>

#include "ember/core/error.h"

namespace ember {

namespace gguf_value {

namespace {
GgufValue unsigned_value(GgufType type, uint64_t v) {
  GgufValue out;
  out.type = type;
  out.uint_value = v;
  return out;
}
GgufValue signed_value(GgufType type, int64_t v) {
  GgufValue out;
  out.type = type;
  out.int_value = v;
  return out;
}
GgufValue float_value(GgufType type, double v) {
  GgufValue out;
  out.type = type;
  out.float_value = v;
  return out;
}
}  // namespace

GgufValue u8(uint8_t v) {
  return unsigned_value(GgufType::Uint8, v);
}
GgufValue i8(int8_t v) {
  return signed_value(GgufType::Int8, v);
}
GgufValue u16(uint16_t v) {
  return unsigned_value(GgufType::Uint16, v);
}
GgufValue i16(int16_t v) {
  return signed_value(GgufType::Int16, v);
}
GgufValue u32(uint32_t v) {
  return unsigned_value(GgufType::Uint32, v);
}
GgufValue i32(int32_t v) {
  return signed_value(GgufType::Int32, v);
}
GgufValue u64(uint64_t v) {
  return unsigned_value(GgufType::Uint64, v);
}
GgufValue i64(int64_t v) {
  return signed_value(GgufType::Int64, v);
}
GgufValue f32(float v) {
  return float_value(GgufType::Float32, v);
}
GgufValue f64(double v) {
  return float_value(GgufType::Float64, v);
}
GgufValue boolean(bool v) {
  return unsigned_value(GgufType::Bool, v ? 1 : 0);
}

GgufValue string(std::string v) {
  GgufValue out;
  out.type = GgufType::String;
  out.string_value = std::move(v);
  return out;
}

GgufValue array(GgufType element_type, std::vector<GgufValue> elements) {
  GgufValue out;
  out.type = GgufType::Array;
  out.array_type = element_type;
  out.array = std::move(elements);
  return out;
}

GgufValue string_array(const std::vector<std::string>& v) {
  std::vector<GgufValue> elements;
  elements.reserve(v.size());
  for (const std::string& s : v) elements.push_back(string(s));
  return array(GgufType::String, std::move(elements));
}

GgufValue i32_array(const std::vector<int32_t>& v) {
  std::vector<GgufValue> elements;
  elements.reserve(v.size());
  for (int32_t x : v) elements.push_back(i32(x));
  return array(GgufType::Int32, std::move(elements));
}

GgufValue f32_array(const std::vector<float>& v) {
  std::vector<GgufValue> elements;
  elements.reserve(v.size());
  for (float x : v) elements.push_back(f32(x));
  return array(GgufType::Float32, std::move(elements));
}

}  // namespace gguf_value

namespace {

using Bytes = std::vector<uint8_t>;

template <typename T>
void put_le(Bytes& out, T v) {
  // The host is little-endian, as the reader assumes too.
  const size_t at = out.size();
  out.resize(at + sizeof(T));
  std::memcpy(out.data() + at, &v, sizeof(T));
}

void put_string(Bytes& out, const std::string& s) {
  put_le<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

// The value's payload (no type tag: the caller writes it, once per key or once per array).
void put_value(Bytes& out, const GgufValue& v, const std::string& key) {
  switch (v.type) {
    case GgufType::Uint8:
      return put_le(out, static_cast<uint8_t>(v.uint_value));
    case GgufType::Uint16:
      return put_le(out, static_cast<uint16_t>(v.uint_value));
    case GgufType::Uint32:
      return put_le(out, static_cast<uint32_t>(v.uint_value));
    case GgufType::Uint64:
      return put_le(out, v.uint_value);
    case GgufType::Bool:
      return put_le(out, static_cast<uint8_t>(v.uint_value != 0 ? 1 : 0));
    case GgufType::Int8:
      return put_le(out, static_cast<int8_t>(v.int_value));
    case GgufType::Int16:
      return put_le(out, static_cast<int16_t>(v.int_value));
    case GgufType::Int32:
      return put_le(out, static_cast<int32_t>(v.int_value));
    case GgufType::Int64:
      return put_le(out, v.int_value);
    case GgufType::Float32:
      return put_le(out, static_cast<float>(v.float_value));
    case GgufType::Float64:
      return put_le(out, v.float_value);
    case GgufType::String:
      return put_string(out, v.string_value);
    case GgufType::Array:
      put_le(out, static_cast<uint32_t>(v.array_type));
      put_le<uint64_t>(out, v.array.size());
      for (size_t i = 0; i < v.array.size(); ++i) {
        if (v.array[i].type != v.array_type) {
          throw Error(ErrorKind::InvalidArgument,
                      "GGUF metadata key '" + key + "': array element " + std::to_string(i) +
                          " has type " + gguf_type_name(v.array[i].type) + ", expected " +
                          gguf_type_name(v.array_type));
        }
        put_value(out, v.array[i], key);
      }
      return;
  }
  throw Error(ErrorKind::InvalidArgument, "GGUF metadata key '" + key + "' has an unknown type");
}

uint64_t round_up(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

GgufWriter::~GgufWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  metadata_.emplace_back(key, std::move(value));
}

bool GgufWriter::erase(const std::string& key) {
  for (auto it = metadata_.begin(); it != metadata_.end(); ++it) {
    if (it->first == key) {
      metadata_.erase(it);
      return true;
    }
  }
  return false;
}

const GgufValue* GgufWriter::find(const std::string& key) const {
  for (const auto& [k, v] : metadata_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void GgufWriter::add_tensor(const std::string& name, DType dtype,
                            const std::vector<int64_t>& shape) {
  if (shape.empty()) throw Error(ErrorKind::InvalidArgument, "tensor " + name + " has no shape");
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < shape.size(); ++d) rows *= shape[d];
  const int64_t row_bytes = dtype_row_bytes(dtype, shape.back());
  add_tensor({name, ggml_type_of(dtype), shape, static_cast<uint64_t>(rows * row_bytes)});
}

void GgufWriter::add_tensor(GgufWriterTensor tensor) {
  tensors_.push_back(std::move(tensor));
}

uint64_t GgufWriter::alignment() const {
  const GgufValue* a = find("general.alignment");
  if (a == nullptr) return 32;
  const std::optional<int64_t> v = a->as_int();
  if (!a->is_integer() || !v || *v <= 0 || (*v & (*v - 1)) != 0) {
    throw Error(ErrorKind::InvalidArgument,
                "general.alignment must be a positive power of two (got " + a->to_display() + ")");
  }
  return static_cast<uint64_t>(*v);
}

void GgufWriter::open(const std::string& path) {
  if (file_ != nullptr) throw Error("GgufWriter::open called twice (" + path_ + ")");
  alignment_ = alignment();
  Bytes header;
  header.reserve(1 << 16);
  put_le<uint32_t>(header, 0x46554747u);  // "GGUF" read as a little-endian u32
  put_le<uint32_t>(header, 3);
  put_le<uint64_t>(header, tensors_.size());
  put_le<uint64_t>(header, metadata_.size());
  std::unordered_set<std::string> keys;
  for (const auto& [key, value] : metadata_) {
    if (!keys.insert(key).second) {
      throw Error(ErrorKind::InvalidArgument, "duplicate GGUF metadata key '" + key + "'");
    }
    put_string(header, key);
    put_le(header, static_cast<uint32_t>(value.type));
    put_value(header, value, key);
  }
  std::unordered_set<std::string> names;
  uint64_t offset = 0;  // relative to the data section
  for (const GgufWriterTensor& t : tensors_) {
    if (!names.insert(t.name).second) {
      throw Error(ErrorKind::InvalidArgument, "duplicate tensor name " + t.name);
    }
    put_string(header, t.name);
    put_le<uint32_t>(header, static_cast<uint32_t>(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) put_le<uint64_t>(header, t.shape[d]);
    put_le<uint32_t>(header, t.ggml_type);
    put_le<uint64_t>(header, offset);
    offset = round_up(offset + t.nbytes, alignment_);
  }
  file_ = std::fopen(path.c_str(), "wb");
  if (file_ == nullptr) {
    throw Error::in_file(ErrorKind::NotFound, path,
                         std::string("cannot create file: ") + std::strerror(errno));
  }
  path_ = path;
  written_ = 0;
  put(header.data(), header.size());
  pad_to_alignment();
  current_ = 0;
  current_written_ = 0;
  advance_past_full_tensors();
}

void GgufWriter::put(const void* data, uint64_t n) {
  if (n == 0) return;
  if (std::fwrite(data, 1, n, file_) != n) {
    throw Error::in_file(ErrorKind::Unavailable, path_,
                         std::string("write failed: ") + std::strerror(errno));
  }
  written_ += n;
}

void GgufWriter::pad_to_alignment() {
  static const uint8_t kZeros[256] = {};
  uint64_t pad = round_up(written_, alignment_) - written_;
  while (pad > 0) {
    const uint64_t n = pad < sizeof kZeros ? pad : sizeof kZeros;
    put(kZeros, n);
    pad -= n;
  }
}

void GgufWriter::advance_past_full_tensors() {
  while (current_ < tensors_.size() && current_written_ == tensors_[current_].nbytes) {
    ++current_;
    current_written_ = 0;
    // Every tensor, the last included, is padded to the alignment, as ggml's own writer does
    // (a reader that sizes the data section as the sum of padded tensors finds all of it).
    pad_to_alignment();
  }
}

void GgufWriter::write_tensor_data(const void* data, uint64_t n) {
  if (file_ == nullptr) throw Error("GgufWriter: write_tensor_data before open");
  const auto* bytes = static_cast<const uint8_t*>(data);
  while (n > 0) {
    if (current_ >= tensors_.size()) {
      throw Error(ErrorKind::InvalidArgument,
                  path_ + ": " + std::to_string(n) + " bytes of tensor data past the last tensor");
    }
    const uint64_t room = tensors_[current_].nbytes - current_written_;
    const uint64_t take = n < room ? n : room;
    put(bytes, take);
    bytes += take;
    n -= take;
    current_written_ += take;
    advance_past_full_tensors();
  }
}

void GgufWriter::close() {
  if (file_ == nullptr) throw Error("GgufWriter: close before open");
  if (current_ < tensors_.size()) {
    const GgufWriterTensor& t = tensors_[current_];
    throw Error(ErrorKind::InvalidArgument, path_ + ": tensor " + t.name + " got " +
                                                std::to_string(current_written_) + " of its " +
                                                std::to_string(t.nbytes) + " bytes");
  }
  std::FILE* f = file_;
  file_ = nullptr;
  const bool flushed = std::fflush(f) == 0;
  const int err = errno;
  if (std::fclose(f) != 0 || !flushed) {
    throw Error::in_file(ErrorKind::Unavailable, path_,
                         std::string("write failed: ") + std::strerror(flushed ? errno : err));
  }
}

}  // namespace ember
