// GGUF reader. File layout (all integers little-endian):
//
//   "GGUF" | u32 version | u64 tensor_count | u64 kv_count
//   kv_count × { string key | u32 value_type | value }
//   tensor_count × { string name | u32 n_dims | n_dims × u64 ne (innermost first)
//                    | u32 ggml_type | u64 offset (relative to the data section) }
//   padding to a multiple of general.alignment (default 32)
//   data section
//
// where string = u64 length + bytes (no terminator) and an array value is
// u32 element_type + u64 count + count × element (elements may themselves be arrays).
//
// The file is untrusted: every read goes through Reader, which checks the remaining length first,
// and every count is compared with the bytes left *before* memory is reserved for it, so a corrupt
// or truncated file produces an ember::Error and never a crash or a huge allocation.
#include "ember/formats/gguf.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <unordered_set>

#include "ember/core/error.h"

namespace ember {

namespace {

constexpr uint32_t kMaxDims = 4;
// Arrays of arrays are legal but nothing real nests deeply; a bound keeps a crafted file from
// recursing the parser off the end of the stack.
constexpr int kMaxArrayDepth = 8;

// Smallest encoding of one value of `type`, used to bound counts against the bytes left.
uint64_t min_encoded_size(GgufType type) {
  switch (type) {
    case GgufType::Uint8:
    case GgufType::Int8:
    case GgufType::Bool:
      return 1;
    case GgufType::Uint16:
    case GgufType::Int16:
      return 2;
    case GgufType::Uint32:
    case GgufType::Int32:
    case GgufType::Float32:
      return 4;
    case GgufType::Uint64:
    case GgufType::Int64:
    case GgufType::Float64:
    case GgufType::String:
      return 8;  // u64 length, possibly empty
    case GgufType::Array:
      return 4 + 8;  // element type + count, possibly empty
  }
  return 1;
}

bool valid_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufType::Float64);
}

// Bounds-checked little-endian cursor over the mapping.
class Reader {
 public:
  explicit Reader(const MappedFile& file) : file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return file_.size() - pos_; }

  void need(uint64_t n, const std::string& what) const {
    if (n > remaining()) {
      throw Error::in_file(ErrorKind::InvalidFile, file_.path(),
                           "truncated file: " + what + " needs " + std::to_string(n) +
                               " bytes at offset " + std::to_string(pos_) + " but only " +
                               std::to_string(remaining()) + " remain");
    }
  }

  template <typename T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, file_.data() + pos_, sizeof(T));  // unaligned-safe; host is little-endian
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& what) {
    uint64_t len = read<uint64_t>(what + " (length)");
    need(len, what);  // before allocating: a corrupt length cannot exceed the file
    std::string s(reinterpret_cast<const char*>(file_.data() + pos_), static_cast<size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  const MappedFile& file_;
  uint64_t pos_ = 0;
};

GgufValue read_value(Reader& r, GgufType type, const std::string& path, const std::string& what,
                     int depth) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::Uint8:
      v.uint_value = r.read<uint8_t>(what);
      break;
    case GgufType::Uint16:
      v.uint_value = r.read<uint16_t>(what);
      break;
    case GgufType::Uint32:
      v.uint_value = r.read<uint32_t>(what);
      break;
    case GgufType::Uint64:
      v.uint_value = r.read<uint64_t>(what);
      break;
    case GgufType::Int8:
      v.int_value = r.read<int8_t>(what);
      break;
    case GgufType::Int16:
      v.int_value = r.read<int16_t>(what);
      break;
    case GgufType::Int32:
      v.int_value = r.read<int32_t>(what);
      break;
    case GgufType::Int64:
      v.int_value = r.read<int64_t>(what);
      break;
    case GgufType::Float32:
      v.float_value = r.read<float>(what);
      break;
    case GgufType::Float64:
      v.float_value = r.read<double>(what);
      break;
    case GgufType::Bool: {
      uint8_t b = r.read<uint8_t>(what);
      if (b > 1) {
        throw Error::in_file(ErrorKind::InvalidFile, path,
                             what + " is a bool with invalid value " + std::to_string(b));
      }
      v.uint_value = b;
      break;
    }
    case GgufType::String:
      v.string_value = r.read_string(what);
      break;
    case GgufType::Array: {
      if (depth >= kMaxArrayDepth) {
        throw Error::in_file(
            ErrorKind::InvalidFile, path,
            what + " nests arrays more than " + std::to_string(kMaxArrayDepth) + " deep");
      }
      uint32_t elem = r.read<uint32_t>(what + " (array element type)");
      if (!valid_value_type(elem)) {
        throw Error::in_file(ErrorKind::InvalidFile, path,
                             what + " has unknown array element type " + std::to_string(elem));
      }
      v.array_type = static_cast<GgufType>(elem);
      uint64_t count = r.read<uint64_t>(what + " (array length)");
      uint64_t min_size = min_encoded_size(v.array_type);
      if (count > r.remaining() / min_size) {
        throw Error::in_file(ErrorKind::InvalidFile, path,
                             "truncated file: " + what + " claims " + std::to_string(count) +
                                 " elements of type " + gguf_type_name(v.array_type) +
                                 " but only " + std::to_string(r.remaining()) + " bytes remain");
      }
      v.array.reserve(static_cast<size_t>(count));
      for (uint64_t i = 0; i < count; ++i) {
        v.array.push_back(read_value(r, v.array_type, path, what, depth + 1));
      }
      break;
    }
  }
  return v;
}

// a * b, or nullopt on int64 overflow.
std::optional<int64_t> checked_mul(int64_t a, int64_t b) {
  int64_t out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// Display precision: 7 significant digits is what a float32 carries (1e-5f prints as "1e-05",
// not "9.99999975e-06"); float64 gets 15.
std::string format_number(double d, int digits) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%.*g", digits, d);
  return buf;
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

}  // namespace

const char* gguf_type_name(GgufType type) {
  switch (type) {
    case GgufType::Uint8:
      return "uint8";
    case GgufType::Int8:
      return "int8";
    case GgufType::Uint16:
      return "uint16";
    case GgufType::Int16:
      return "int16";
    case GgufType::Uint32:
      return "uint32";
    case GgufType::Int32:
      return "int32";
    case GgufType::Float32:
      return "float32";
    case GgufType::Bool:
      return "bool";
    case GgufType::String:
      return "string";
    case GgufType::Array:
      return "array";
    case GgufType::Uint64:
      return "uint64";
    case GgufType::Int64:
      return "int64";
    case GgufType::Float64:
      return "float64";
  }
  return "unknown";
}

namespace {
// ggml type id of each DType, in DType order.
constexpr uint32_t kGgmlIds[] = {0, 1, 30, 8, 2, 3, 6, 7, 9, 10, 11, 12, 13, 14, 15, 20, 23};
static_assert(std::size(kGgmlIds) == std::size(kAllDTypes));
}  // namespace

std::optional<DType> dtype_for_ggml(uint32_t ggml_type) {
  for (size_t i = 0; i < std::size(kGgmlIds); ++i) {
    if (kGgmlIds[i] == ggml_type) return kAllDTypes[i];
  }
  return std::nullopt;
}

uint32_t ggml_type_of(DType dtype) {
  return kGgmlIds[static_cast<size_t>(dtype)];
}

std::string ggml_type_name(uint32_t ggml_type) {
  // ggml's type ids; gaps are ids ggml has retired.
  static constexpr std::array<const char*, 40> kNames = {
      "F32",     "F16",    "Q4_0",    "Q4_1",  nullptr,  nullptr, "Q5_0",  "Q5_1",
      "Q8_0",    "Q8_1",   "Q2_K",    "Q3_K",  "Q4_K",   "Q5_K",  "Q6_K",  "Q8_K",
      "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS",
      "I8",      "I16",    "I32",     "I64",   "F64",    "IQ1_M", "BF16",  nullptr,
      nullptr,   nullptr,  "TQ1_0",   "TQ2_0", nullptr,  nullptr, nullptr, "MXFP4"};
  if (ggml_type < kNames.size() && kNames[ggml_type] != nullptr) return kNames[ggml_type];
  return "type " + std::to_string(ggml_type);
}

// ---- GgufValue ----

bool GgufValue::is_integer() const {
  switch (type) {
    case GgufType::Uint8:
    case GgufType::Int8:
    case GgufType::Uint16:
    case GgufType::Int16:
    case GgufType::Uint32:
    case GgufType::Int32:
    case GgufType::Uint64:
    case GgufType::Int64:
      return true;
    default:
      return false;
  }
}

std::optional<int64_t> GgufValue::as_int() const {
  switch (type) {
    case GgufType::Uint8:
    case GgufType::Uint16:
    case GgufType::Uint32:
    case GgufType::Uint64:
    case GgufType::Bool:
      if (uint_value > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
      return static_cast<int64_t>(uint_value);
    case GgufType::Int8:
    case GgufType::Int16:
    case GgufType::Int32:
    case GgufType::Int64:
      return int_value;
    default:
      return std::nullopt;
  }
}

std::optional<double> GgufValue::as_float() const {
  switch (type) {
    case GgufType::Float32:
    case GgufType::Float64:
      return float_value;
    case GgufType::Uint8:
    case GgufType::Uint16:
    case GgufType::Uint32:
    case GgufType::Uint64:
      return static_cast<double>(uint_value);
    case GgufType::Int8:
    case GgufType::Int16:
    case GgufType::Int32:
    case GgufType::Int64:
      return static_cast<double>(int_value);
    default:
      return std::nullopt;
  }
}

std::string GgufValue::to_display(size_t max_items) const {
  switch (type) {
    case GgufType::Bool:
      return uint_value ? "true" : "false";
    case GgufType::Uint8:
    case GgufType::Uint16:
    case GgufType::Uint32:
    case GgufType::Uint64:
      return std::to_string(uint_value);
    case GgufType::Int8:
    case GgufType::Int16:
    case GgufType::Int32:
    case GgufType::Int64:
      return std::to_string(int_value);
    case GgufType::Float32:
      return format_number(float_value, 7);
    case GgufType::Float64:
      return format_number(float_value, 15);
    case GgufType::String:
      return quote(string_value);
    case GgufType::Array: {
      std::string out = "[";
      size_t shown = std::min(max_items, array.size());
      for (size_t i = 0; i < shown; ++i) {
        if (i) out += ", ";
        out += array[i].to_display(max_items);
      }
      if (shown < array.size()) {
        out += (shown ? ", ... (" : "... (") + std::to_string(array.size()) + " " +
               gguf_type_name(array_type) + " items)";
      }
      return out + "]";
    }
  }
  return "?";
}

// ---- GgufFile ----

namespace {

struct GgufPreamble {
  uint32_t version = 0;
  uint64_t tensor_count = 0;
  uint64_t kv_count = 0;
};

// Magic, version and the two counts that precede the metadata.
GgufPreamble read_preamble(Reader& r, const MappedFile& file, const std::string& path) {
  r.need(4, "magic");
  if (std::memcmp(file.data(), "GGUF", 4) != 0) {
    throw Error::in_file(ErrorKind::InvalidFile, path, "not a GGUF file (bad magic)");
  }
  r.read<uint32_t>("magic");
  GgufPreamble p;
  p.version = r.read<uint32_t>("version");
  if (p.version != 2 && p.version != 3) {
    // v1 used u32 counts and lengths, so its layout differs; later versions are unknown.
    throw Error::in_file(ErrorKind::Unsupported, path,
                         "unsupported GGUF version " + std::to_string(p.version) +
                             " (only versions 2 and 3 are supported)");
  }
  p.tensor_count = r.read<uint64_t>("tensor count");
  p.kv_count = r.read<uint64_t>("metadata count");
  return p;
}

std::vector<std::pair<std::string, GgufValue>> read_metadata(Reader& r, uint64_t kv_count,
                                                             const std::string& path) {
  // Each kv is at least key length (8) + type (4) + a 1-byte value.
  if (kv_count > r.remaining() / 13) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         "metadata count " + std::to_string(kv_count) +
                             " is larger than the file can hold (corrupt or truncated file)");
  }
  std::vector<std::pair<std::string, GgufValue>> metadata;
  metadata.reserve(static_cast<size_t>(kv_count));
  std::unordered_set<std::string> keys;  // a crafted file may hold many keys: no quadratic scan
  for (uint64_t i = 0; i < kv_count; ++i) {
    std::string where = "metadata entry #" + std::to_string(i);
    std::string key = r.read_string(where + " key");
    std::string what = "value of key '" + key + "'";
    uint32_t type = r.read<uint32_t>("type of key '" + key + "'");
    if (!valid_value_type(type)) {
      throw Error::in_file(
          ErrorKind::InvalidFile, path,
          "metadata key '" + key + "' has unknown value type " + std::to_string(type));
    }
    if (!keys.insert(key).second) {
      throw Error::in_file(ErrorKind::InvalidFile, path, "duplicate metadata key '" + key + "'");
    }
    metadata.emplace_back(key, read_value(r, static_cast<GgufType>(type), path, what, 0));
  }
  return metadata;
}

// general.alignment when present (a positive power of two), else `fallback`.
uint64_t alignment_from(const GgufValue* a, uint64_t fallback, const std::string& path) {
  if (a == nullptr) return fallback;
  std::optional<int64_t> v = a->as_int();
  if (!a->is_integer() || !v || *v <= 0 || (*v & (*v - 1)) != 0) {
    throw Error::in_file(
        ErrorKind::InvalidFile, path,
        "general.alignment must be a positive power of two (got " + a->to_display() + ")");
  }
  return static_cast<uint64_t>(*v);
}

// Bytes of a tensor of info.dtype whose ggml dims are `ne` (innermost first), checked against
// whole blocks, overflow and the file size; `t` names the tensor in messages.
uint64_t tensor_nbytes(const GgufTensorInfo& info, const std::array<int64_t, kMaxDims>& ne,
                       uint32_t n_dims, uint64_t file_size, const std::string& path,
                       const std::string& t) {
  int64_t block = dtype_block_elems(info.dtype);
  if (ne[0] % block != 0) {
    throw Error::in_tensor(ErrorKind::InvalidFile, path, info.name,
                           t + " has inner dimension " + std::to_string(ne[0]) +
                               ", not a multiple of the " + dtype_name(info.dtype) +
                               " block size " + std::to_string(block));
  }
  std::optional<int64_t> blocks = ne[0] / block;
  for (uint32_t d = 1; d < n_dims && blocks; ++d) blocks = checked_mul(*blocks, ne[d]);
  std::optional<int64_t> bytes =
      blocks ? checked_mul(*blocks, dtype_block_bytes(info.dtype)) : std::nullopt;
  if (!bytes || static_cast<uint64_t>(*bytes) > file_size) {
    throw Error::in_tensor(
        ErrorKind::InvalidFile, path, info.name,
        t + " with shape " + shape_to_string(info.shape) + " is larger than the file");
  }
  return static_cast<uint64_t>(*bytes);
}

// One tensor directory entry (#i). Its data offset relative to the data section goes to
// `rel_offset`; the absolute offset is known only once the whole directory has been read.
GgufTensorInfo read_tensor_info(Reader& r, uint64_t i, uint64_t alignment, uint64_t file_size,
                                const std::string& path, uint64_t& rel_offset) {
  GgufTensorInfo info;
  info.name = r.read_string("name of tensor #" + std::to_string(i));
  const std::string t = "tensor " + info.name;
  uint32_t n_dims = r.read<uint32_t>("dimension count of " + t);
  if (n_dims == 0 || n_dims > kMaxDims) {
    throw Error::in_tensor(ErrorKind::InvalidFile, path, info.name,
                           t + " has " + std::to_string(n_dims) + " dimensions (expected 1 to " +
                               std::to_string(kMaxDims) + ")");
  }
  std::array<int64_t, kMaxDims> ne{};
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t n = r.read<uint64_t>("dimensions of " + t);
    if (n == 0 || n > static_cast<uint64_t>(INT64_MAX)) {
      throw Error::in_tensor(ErrorKind::InvalidFile, path, info.name,
                             t + " has invalid dimension " + std::to_string(n));
    }
    ne[d] = static_cast<int64_t>(n);
  }
  info.ggml_type = r.read<uint32_t>("type of " + t);
  rel_offset = r.read<uint64_t>("data offset of " + t);

  std::optional<DType> dtype = dtype_for_ggml(info.ggml_type);
  if (!dtype) {
    throw Error::in_tensor(ErrorKind::Unsupported, path, info.name,
                           "unsupported tensor type " + ggml_type_name(info.ggml_type) +
                               " for tensor " + info.name +
                               " (ember reads F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q8_1, "
                               "Q2_K..Q8_K, IQ4_NL and IQ4_XS; not the IQ1-IQ3 or TQ types)");
  }
  info.dtype = *dtype;
  // ne[0] is the innermost (contiguous) dimension; ember shapes are outermost first.
  for (uint32_t d = n_dims; d-- > 0;) info.shape.push_back(ne[d]);
  info.nbytes = tensor_nbytes(info, ne, n_dims, file_size, path, t);
  if (rel_offset % alignment != 0) {
    throw Error::in_tensor(ErrorKind::InvalidFile, path, info.name,
                           t + " data offset " + std::to_string(rel_offset) +
                               " is not a multiple of the alignment " + std::to_string(alignment));
  }
  return info;
}

// Turns relative data offsets into absolute ones, checking every tensor's bytes lie in the file.
void place_tensor_data(std::vector<GgufTensorInfo>& tensors,
                       const std::vector<uint64_t>& relative_offsets, uint64_t data_start,
                       uint64_t file_size, const std::string& path) {
  for (size_t i = 0; i < tensors.size(); ++i) {
    GgufTensorInfo& info = tensors[i];
    uint64_t rel = relative_offsets[i];
    if (data_start > file_size || rel > file_size - data_start ||
        info.nbytes > file_size - data_start - rel) {
      throw Error::in_tensor(ErrorKind::InvalidFile, path, info.name,
                             "data of tensor " + info.name + " (" + std::to_string(info.nbytes) +
                                 " bytes at data offset " + std::to_string(rel) +
                                 ") lies past the end of the file (" + std::to_string(file_size) +
                                 " bytes; truncated or corrupt file)");
    }
    info.offset = data_start + rel;
  }
}

}  // namespace

GgufFile::GgufFile(const std::string& path) : mapping_(std::make_shared<MappedFile>(path)) {
  const MappedFile& file = *mapping_;
  Reader r(file);
  const GgufPreamble preamble = read_preamble(r, file, path);
  version_ = preamble.version;
  metadata_ = read_metadata(r, preamble.kv_count, path);
  alignment_ = alignment_from(find("general.alignment"), alignment_, path);

  // Each tensor info is at least name length (8) + n_dims (4) + one ne (8) + type (4) +
  // offset (8).
  const uint64_t tensor_count = preamble.tensor_count;
  if (tensor_count > r.remaining() / 32) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         "tensor count " + std::to_string(tensor_count) +
                             " is larger than the file can hold (corrupt or truncated file)");
  }
  tensors_.reserve(static_cast<size_t>(tensor_count));
  std::vector<uint64_t> relative_offsets(static_cast<size_t>(tensor_count));
  for (uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo info = read_tensor_info(r, i, alignment_, file.size(), path,
                                           relative_offsets[static_cast<size_t>(i)]);
    if (!tensor_index_.emplace(info.name, tensors_.size()).second) {
      throw Error::in_tensor(ErrorKind::InvalidFile, path, info.name,
                             "duplicate tensor name " + info.name);
    }
    tensors_.push_back(std::move(info));
  }

  // The data section starts at the first aligned offset after the tensor directory.
  const uint64_t data_start = (r.pos() + alignment_ - 1) / alignment_ * alignment_;
  place_tensor_data(tensors_, relative_offsets, data_start, file.size(), path);
}

const GgufValue* GgufFile::find(const std::string& key) const {
  for (const auto& [k, v] : metadata_) {
    if (k == key) return &v;
  }
  return nullptr;
}

namespace {

const GgufValue& require_key(const GgufFile& f, const std::string& key) {
  const GgufValue* v = f.find(key);
  if (v == nullptr) {
    throw Error::in_file(ErrorKind::InvalidFile, f.path(), "metadata key '" + key + "' is missing");
  }
  return *v;
}

[[noreturn]] void wrong_type(const GgufFile& f, const std::string& key, const GgufValue& v,
                             const char* expected) {
  throw Error::in_file(
      ErrorKind::InvalidFile, f.path(),
      "metadata key '" + key + "' has type " + gguf_type_name(v.type) + ", expected " + expected);
}

}  // namespace

std::string GgufFile::get_string(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  if (v.type != GgufType::String) wrong_type(*this, key, v, "string");
  return v.string_value;
}

int64_t GgufFile::get_int(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  std::optional<int64_t> i = v.as_int();
  if (!i) wrong_type(*this, key, v, "integer");
  return *i;
}

double GgufFile::get_float(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  std::optional<double> d = v.as_float();
  if (!d) wrong_type(*this, key, v, "number");
  return *d;
}

const std::vector<GgufValue>& GgufFile::get_array(const std::string& key) const {
  const GgufValue& v = require_key(*this, key);
  if (v.type != GgufType::Array) wrong_type(*this, key, v, "array");
  return v.array;
}

const GgufTensorInfo* GgufFile::find_tensor(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

TensorView GgufFile::view(const GgufTensorInfo& info) const {
  TensorView v;
  v.name = info.name;
  v.dtype = info.dtype;
  v.shape = info.shape;
  v.data = mapping_->data() + info.offset;
  v.nbytes = info.nbytes;
  return v;
}

}  // namespace ember
