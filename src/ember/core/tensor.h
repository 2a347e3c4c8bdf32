// A typed, shaped view of bytes owned elsewhere (an mmap'd file or a Weights arena).
// Shapes are row-major, outermost first, as PyTorch writes them: a linear layer's weight is
// [out_features, in_features] and each of its rows is contiguous. (GGUF lists dims innermost
// first; the GGUF parser reverses them.)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ember/core/dtype.h"

namespace ember {

struct TensorView {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  uint64_t nbytes = 0;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  int64_t rows() const { return shape.empty() ? 1 : numel() / shape.back(); }
  int64_t cols() const { return shape.empty() ? 1 : shape.back(); }
};

std::string shape_to_string(const std::vector<int64_t>& shape);

}  // namespace ember
