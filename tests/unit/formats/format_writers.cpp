#include "unit/formats/format_writers.h"

#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>
#include <stdexcept>

#include <gtest/gtest.h>

#include "ember/core/error.h"
#include "ember/core/half.h"

namespace ember::test {

void put_u32(Bytes& out, uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void put_u64(Bytes& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

void put_gguf_string(Bytes& out, const std::string& s) {
  put_u64(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void patch_u32(Bytes& bytes, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) bytes.at(at + i) = static_cast<uint8_t>(v >> (8 * i));
}

void patch_u64(Bytes& bytes, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) bytes.at(at + i) = static_cast<uint8_t>(v >> (8 * i));
}

void write_bytes(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

Bytes read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::string error_message(const std::function<void()>& f) {
  try {
    f();
  } catch (const ember::Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected ember::Error, got another exception: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected ember::Error, nothing was thrown";
  return "";
}

// ---- GGUF ----

void GgufWriter::kv_raw(const std::string& key, uint32_t type, const Bytes& payload) {
  kvs_.push_back({key, type, payload});
}

void GgufWriter::kv_u32(const std::string& key, uint32_t v) {
  Bytes b;
  put_u32(b, v);
  kv_raw(key, gguf_t::kU32, b);
}

void GgufWriter::kv_i32(const std::string& key, int32_t v) {
  Bytes b;
  put_u32(b, static_cast<uint32_t>(v));
  kv_raw(key, gguf_t::kI32, b);
}

void GgufWriter::kv_u64(const std::string& key, uint64_t v) {
  Bytes b;
  put_u64(b, v);
  kv_raw(key, gguf_t::kU64, b);
}

void GgufWriter::kv_f32(const std::string& key, float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  Bytes b;
  put_u32(b, bits);
  kv_raw(key, gguf_t::kF32, b);
}

void GgufWriter::kv_bool(const std::string& key, bool v) {
  kv_raw(key, gguf_t::kBool, Bytes{static_cast<uint8_t>(v ? 1 : 0)});
}

void GgufWriter::kv_string(const std::string& key, const std::string& v) {
  Bytes b;
  put_gguf_string(b, v);
  kv_raw(key, gguf_t::kString, b);
}

void GgufWriter::kv_string_array(const std::string& key, const std::vector<std::string>& v) {
  Bytes b;
  put_u32(b, gguf_t::kString);
  put_u64(b, v.size());
  for (const std::string& s : v) put_gguf_string(b, s);
  kv_raw(key, gguf_t::kArray, b);
}

void GgufWriter::kv_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  Bytes b;
  put_u32(b, gguf_t::kI32);
  put_u64(b, v.size());
  for (int32_t x : v) put_u32(b, static_cast<uint32_t>(x));
  kv_raw(key, gguf_t::kArray, b);
}

void GgufWriter::tensor(const std::string& name, uint32_t ggml_type,
                        const std::vector<int64_t>& shape, const Bytes& data) {
  tensors_.push_back({name, ggml_type, shape, data});
}

Bytes GgufWriter::build(uint32_t version) {
  Bytes out = {'G', 'G', 'U', 'F'};
  put_u32(out, version);
  put_u64(out, tensors_.size());
  put_u64(out, kvs_.size());
  for (const Kv& kv : kvs_) {
    put_gguf_string(out, kv.key);
    put_u32(out, kv.type);
    out.insert(out.end(), kv.payload.begin(), kv.payload.end());
  }
  // Relative offsets: each tensor starts at the next aligned position of the data section.
  std::vector<uint64_t> offsets;
  uint64_t next = 0;
  for (const Tensor& t : tensors_) {
    next = (next + alignment_ - 1) / alignment_ * alignment_;
    offsets.push_back(next);
    next += t.data.size();
  }
  tensor_offset_fields.clear();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    const Tensor& t = tensors_[i];
    put_gguf_string(out, t.name);
    put_u32(out, static_cast<uint32_t>(t.shape.size()));
    for (size_t d = t.shape.size(); d-- > 0;) put_u64(out, static_cast<uint64_t>(t.shape[d]));
    put_u32(out, t.type);
    tensor_offset_fields.push_back(out.size());
    put_u64(out, offsets[i]);
  }
  // Pad to the data section; nothing follows the last tensor, so truncating any byte breaks it.
  if (!tensors_.empty()) {
    out.resize((out.size() + alignment_ - 1) / alignment_ * alignment_, 0);
  }
  data_start = out.size();
  for (size_t i = 0; i < tensors_.size(); ++i) {
    out.resize(data_start + offsets[i], 0);
    out.insert(out.end(), tensors_[i].data.begin(), tensors_[i].data.end());
  }
  return out;
}

// ---- safetensors ----

void SafetensorsWriter::metadata(const std::string& key, const std::string& value) {
  metadata_.emplace_back(key, value);
}

void SafetensorsWriter::tensor(const std::string& name, const std::string& dtype,
                               const std::vector<int64_t>& shape, const Bytes& data) {
  tensors_.push_back({name, dtype, shape, data});
}

std::string SafetensorsWriter::header() const {
  // Hand-written JSON so tests control the exact text (names here need no escaping).
  std::ostringstream h;
  h << "{";
  bool first = true;
  if (!metadata_.empty()) {
    h << "\"__metadata__\":{";
    for (size_t i = 0; i < metadata_.size(); ++i) {
      h << (i ? "," : "") << "\"" << metadata_[i].first << "\":\"" << metadata_[i].second << "\"";
    }
    h << "}";
    first = false;
  }
  size_t offset = 0;
  for (const Tensor& t : tensors_) {
    h << (first ? "" : ",") << "\"" << t.name << "\":{\"dtype\":\"" << t.dtype << "\",\"shape\":[";
    for (size_t i = 0; i < t.shape.size(); ++i) h << (i ? "," : "") << t.shape[i];
    h << "],\"data_offsets\":[" << offset << "," << offset + t.data.size() << "]}";
    offset += t.data.size();
    first = false;
  }
  h << "}";
  return h.str();
}

Bytes SafetensorsWriter::build_with_header(const std::string& header) const {
  std::string padded = header;
  while (padded.size() % 8 != 0) padded += ' ';  // as the reference writer does
  Bytes out;
  put_u64(out, padded.size());
  out.insert(out.end(), padded.begin(), padded.end());
  for (const Tensor& t : tensors_) out.insert(out.end(), t.data.begin(), t.data.end());
  return out;
}

// ---- element encoders ----

Bytes f32_bytes(const std::vector<float>& v) {
  Bytes b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

Bytes f16_bytes(const std::vector<float>& v) {
  Bytes b;
  for (float x : v) {
    uint16_t h = f32_to_f16(x);
    b.push_back(static_cast<uint8_t>(h));
    b.push_back(static_cast<uint8_t>(h >> 8));
  }
  return b;
}

Bytes bf16_bytes(const std::vector<float>& v) {
  Bytes b;
  for (float x : v) {
    uint16_t h = f32_to_bf16(x);
    b.push_back(static_cast<uint8_t>(h));
    b.push_back(static_cast<uint8_t>(h >> 8));
  }
  return b;
}

}  // namespace ember::test
