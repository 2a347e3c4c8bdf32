#include "ember/core/dtype.h"

#include <algorithm>
#include <cctype>

#include "ember/core/error.h"

namespace ember {

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return "f32";
    case DType::F16:
      return "f16";
    case DType::BF16:
      return "bf16";
    case DType::Q8_0:
      return "q8_0";
    case DType::Q4_0:
      return "q4_0";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (DType d : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0}) {
    if (lower == dtype_name(d)) return d;
  }
  return std::nullopt;
}

int64_t dtype_block_elems(DType dtype) {
  return dtype_is_quantized(dtype) ? kQuantBlock : 1;
}

int64_t dtype_block_bytes(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::F16:
      return 2;
    case DType::BF16:
      return 2;
    case DType::Q8_0:
      return sizeof(BlockQ8_0);
    case DType::Q4_0:
      return sizeof(BlockQ4_0);
  }
  return 0;
}

int64_t dtype_row_bytes(DType dtype, int64_t n) {
  int64_t block = dtype_block_elems(dtype);
  if (n % block != 0) {
    throw Error(std::string("a row of ") + std::to_string(n) + " elements is not a multiple of " +
                std::to_string(block) + " as " + dtype_name(dtype) + " needs");
  }
  return n / block * dtype_block_bytes(dtype);
}

bool dtype_is_quantized(DType dtype) {
  return dtype == DType::Q8_0 || dtype == DType::Q4_0;
}

}  // namespace ember
