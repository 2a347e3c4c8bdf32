// safetensors reader. File layout:
//
//   u64 N (little-endian) | N bytes of UTF-8 JSON header | data section (to the end of the file)
//
// The header is an object: an optional "__metadata__" map of string -> string, and per tensor
//   "name": {"dtype": "F32", "shape": [rows, cols], "data_offsets": [begin, end]}
// with begin/end relative to the start of the data section. Nothing in it is trusted: every
// offset is checked against the data section and against shape × dtype size.
#include "ember/formats/safetensors.h"

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <utility>

#include "ember/core/error.h"
#include "ember/core/json_depth.h"

namespace ember {

namespace {

using Json = nlohmann::ordered_json;  // keeps header order, which tensors() promises

std::optional<DType> dtype_from_safetensors(const std::string& name) {
  if (name == "F32") return DType::F32;
  if (name == "F16") return DType::F16;
  if (name == "BF16") return DType::BF16;
  return std::nullopt;
}

// Reads a non-negative integer that fits in int64 from `j`, or throws naming `what`.
int64_t read_index(const Json& j, const std::string& path, const std::string& what) {
  if (!j.is_number_integer()) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         what + " must be a non-negative integer (got " + j.dump() + ")");
  }
  if (j.is_number_unsigned()) {
    uint64_t u = j.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) {
      throw Error::in_file(ErrorKind::InvalidFile, path, what + " is too large");
    }
    return static_cast<int64_t>(u);
  }
  int64_t v = j.get<int64_t>();
  if (v < 0) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         what + " must be non-negative (got " + j.dump() + ")");
  }
  return v;
}

TensorView parse_tensor_entry(const std::string& path, const std::string& name, const Json& entry,
                              const uint8_t* data_section, uint64_t data_size) {
  const std::string t = "tensor " + name;
  if (!entry.is_object()) {
    throw Error::in_tensor(ErrorKind::InvalidFile, path, name,
                           "header entry for " + t + " is not an object");
  }
  auto field = [&](const char* key) -> const Json& {
    auto it = entry.find(key);
    if (it == entry.end()) {
      throw Error::in_tensor(ErrorKind::InvalidFile, path, name, t + " has no '" + key + "'");
    }
    return *it;
  };

  const Json& dtype_json = field("dtype");
  if (!dtype_json.is_string()) {
    throw Error::in_tensor(ErrorKind::InvalidFile, path, name,
                           "dtype of " + t + " is not a string");
  }
  const std::string dtype_str = dtype_json.get<std::string>();
  std::optional<DType> dtype = dtype_from_safetensors(dtype_str);
  if (!dtype) {
    throw Error::in_tensor(ErrorKind::Unsupported, path, name,
                           "unsupported dtype " + dtype_str + " for tensor " + name +
                               " (ember reads F32, F16 and BF16 safetensors)");
  }

  const Json& shape_json = field("shape");
  if (!shape_json.is_array()) {
    throw Error::in_tensor(ErrorKind::InvalidFile, path, name,
                           "shape of " + t + " is not an array");
  }
  TensorView view;
  view.name = name;
  view.dtype = *dtype;
  int64_t numel = 1;
  bool overflow = false;
  for (const Json& d : shape_json) {
    int64_t n = read_index(d, path, "a dimension of " + t);
    view.shape.push_back(n);
    overflow = overflow || __builtin_mul_overflow(numel, n, &numel);
  }

  const Json& offsets = field("data_offsets");
  if (!offsets.is_array() || offsets.size() != 2) {
    throw Error::in_tensor(ErrorKind::InvalidFile, path, name,
                           "data_offsets of " + t + " must be [begin, end]");
  }
  uint64_t begin = static_cast<uint64_t>(read_index(offsets[0], path, "data_offsets of " + t));
  uint64_t end = static_cast<uint64_t>(read_index(offsets[1], path, "data_offsets of " + t));
  if (begin > end) {
    throw Error::in_tensor(ErrorKind::InvalidFile, path, name,
                           "data_offsets of " + t + " are reversed [" + std::to_string(begin) +
                               ", " + std::to_string(end) + "]");
  }
  if (end > data_size) {
    throw Error::in_tensor(ErrorKind::InvalidFile, path, name,
                           "data of " + t + " [" + std::to_string(begin) + ", " +
                               std::to_string(end) + ") lies past the end of the data section (" +
                               std::to_string(data_size) + " bytes; truncated or corrupt file)");
  }
  int64_t expected = 0;
  overflow = overflow || __builtin_mul_overflow(numel, dtype_block_bytes(view.dtype), &expected);
  if (overflow || static_cast<uint64_t>(expected) != end - begin) {
    throw Error::in_tensor(ErrorKind::InvalidFile, path, name,
                           t + " has shape " + shape_to_string(view.shape) + " and dtype " +
                               dtype_str + " but data_offsets span " + std::to_string(end - begin) +
                               " bytes");
  }
  view.data = data_section + begin;
  view.nbytes = end - begin;
  return view;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path)
    : mapping_(std::make_shared<MappedFile>(path)) {
  const MappedFile& file = *mapping_;
  if (file.size() < 8) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         "truncated file: " + std::to_string(file.size()) +
                             " bytes is too short for a safetensors header length");
  }
  uint64_t header_len;
  std::memcpy(&header_len, file.data(), 8);
  if (header_len > file.size() - 8) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         "header length " + std::to_string(header_len) +
                             " runs past the end of the file (" + std::to_string(file.size()) +
                             " bytes; truncated or not a safetensors file)");
  }
  const char* header_begin = reinterpret_cast<const char*>(file.data() + 8);
  Json header;
  check_json_depth(std::string_view(header_begin, header_len), path, /*is_file=*/true);
  try {
    header = Json::parse(header_begin, header_begin + header_len);
  } catch (const nlohmann::json::exception& e) {
    throw Error::in_file(ErrorKind::InvalidFile, path,
                         std::string("invalid safetensors JSON header: ") + e.what());
  }
  if (!header.is_object()) {
    throw Error::in_file(ErrorKind::InvalidFile, path, "safetensors header is not a JSON object");
  }

  const uint8_t* data_section = file.data() + 8 + header_len;
  const uint64_t data_size = file.size() - 8 - header_len;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) {
        throw Error::in_file(ErrorKind::InvalidFile, path, "__metadata__ is not an object");
      }
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) {
          throw Error::in_file(ErrorKind::InvalidFile, path,
                               "__metadata__ value '" + k + "' is not a string");
        }
        metadata_[k] = v.get<std::string>();
      }
      continue;
    }
    tensors_.push_back(parse_tensor_entry(path, name, entry, data_section, data_size));
  }
}

HfCheckpoint open_hf_checkpoint(const std::string& directory) {
  namespace fs = std::filesystem;
  HfCheckpoint ckpt;
  ckpt.directory = directory;
  const fs::path dir(directory);
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    throw Error::in_file(ErrorKind::NotFound, directory, "not a directory");
  }

  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";

  auto add_file = [&](const SafetensorsFile& f) {
    ckpt.mappings.push_back(f.mapping());
    for (const TensorView& v : f.tensors()) {
      if (!ckpt.tensors.emplace(v.name, v).second) {
        throw Error::in_tensor(ErrorKind::InvalidFile, f.path(), v.name,
                               "tensor " + v.name + " also appears in another shard");
      }
    }
  };

  if (fs::exists(index, ec)) {
    const std::string index_path = index.string();
    MappedFile index_file(index_path);
    Json j;
    try {
      const char* text = reinterpret_cast<const char*>(index_file.data());
      check_json_depth(std::string_view(text, index_file.size()), index_path, /*is_file=*/true);
      j = Json::parse(text, text + index_file.size());
    } catch (const nlohmann::json::exception& e) {
      throw Error::in_file(ErrorKind::InvalidFile, index_path,
                           std::string("invalid JSON: ") + e.what());
    }
    if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object()) {
      throw Error::in_file(ErrorKind::InvalidFile, index_path, "missing field 'weight_map'");
    }
    // Open each shard once, in the order the index first names it, remembering what it holds.
    std::map<std::string, std::set<std::string>> shard_tensors;
    for (const auto& [tensor, shard] : j["weight_map"].items()) {
      if (!shard.is_string()) {
        throw Error::in_file(ErrorKind::InvalidFile, index_path,
                             "weight_map entry for " + tensor + " is not a file name");
      }
      const std::string shard_name = shard.get<std::string>();
      // Shards live beside the index; refuse names that would escape the directory.
      if (shard_name.empty() || shard_name.find('/') != std::string::npos || shard_name == "." ||
          shard_name == "..") {
        throw Error::in_file(
            ErrorKind::InvalidFile, index_path,
            "weight_map entry for " + tensor + " names an invalid shard '" + shard_name + "'");
      }
      auto [it, inserted] = shard_tensors.try_emplace(shard_name);
      if (inserted) {
        SafetensorsFile file((dir / shard_name).string());
        add_file(file);
        for (const TensorView& v : file.tensors()) it->second.insert(v.name);
      }
      if (it->second.count(tensor) == 0) {
        throw Error::in_tensor(ErrorKind::InvalidFile, index_path, tensor,
                               "tensor " + tensor + " is listed in weight_map but missing " +
                                   "from its shard " + (dir / shard_name).string());
      }
    }
    return ckpt;
  }

  if (fs::exists(single, ec)) {
    add_file(SafetensorsFile(single.string()));
    return ckpt;
  }
  throw Error::in_file(ErrorKind::NotFound, directory,
                       "no model.safetensors or model.safetensors.index.json in directory");
}

}  // namespace ember
