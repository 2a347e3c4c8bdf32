// safetensors reader (one file) and the tensors of an HF checkpoint directory (model.safetensors,
// or shards listed in model.safetensors.index.json; its config.json is read by hf_config.h). Every
// header offset is checked against the file length; F32, F16 and BF16 tensors are accepted.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "ember/core/mapped_file.h"
#include "ember/core/tensor.h"

namespace ember {

class SafetensorsFile {
 public:
  // Throws ember::Error naming the file (and tensor) on: missing file, header length past the end,
  // invalid header JSON, missing dtype/shape/data_offsets, unknown dtype ("unsupported dtype I8 for
  // tensor X" for types ember does not compute in), offsets past the end of the data section,
  // offsets that disagree with shape × dtype size.
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return mapping_->path(); }
  // In header order.
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  std::shared_ptr<const MappedFile> mapping() const { return mapping_; }

 private:
  std::shared_ptr<const MappedFile> mapping_;
  std::vector<TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of an HF checkpoint directory, by name; keeps every shard mapped.
struct HfCheckpoint {
  std::string directory;
  std::vector<std::shared_ptr<const MappedFile>> mappings;
  std::map<std::string, TensorView> tensors;
};

// Reads `directory`/model.safetensors, or every shard named by model.safetensors.index.json
// (and checks that each tensor of the index's weight_map is in the shard it names). Throws
// ember::Error naming the directory/file when neither exists or a shard is broken.
HfCheckpoint open_hf_checkpoint(const std::string& directory);

}  // namespace ember
