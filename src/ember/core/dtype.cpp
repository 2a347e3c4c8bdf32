#include "ember/core/dtype.h"

#include <algorithm>
#include <cctype>

#include "ember/core/error.h"
#include "ember/core/quant_blocks.h"

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
    case DType::Q4_1:
      return "q4_1";
    case DType::Q5_0:
      return "q5_0";
    case DType::Q5_1:
      return "q5_1";
    case DType::Q8_1:
      return "q8_1";
    case DType::Q2_K:
      return "q2_k";
    case DType::Q3_K:
      return "q3_k";
    case DType::Q4_K:
      return "q4_k";
    case DType::Q5_K:
      return "q5_k";
    case DType::Q6_K:
      return "q6_k";
    case DType::Q8_K:
      return "q8_k";
    case DType::IQ4_NL:
      return "iq4_nl";
    case DType::IQ4_XS:
      return "iq4_xs";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  std::string lower(name);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  for (DType d : kAllDTypes) {
    if (lower == dtype_name(d)) return d;
  }
  return std::nullopt;
}

bool dtype_is_super_block(DType dtype) {
  switch (dtype) {
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::Q4_K:
    case DType::Q5_K:
    case DType::Q6_K:
    case DType::Q8_K:
    case DType::IQ4_XS:
      return true;
    default:
      return false;
  }
}

int64_t dtype_block_elems(DType dtype) {
  if (!dtype_is_quantized(dtype)) return 1;
  return dtype_is_super_block(dtype) ? kSuperBlock : kQuantBlock;
}

int64_t dtype_block_bytes(DType dtype) {
  switch (dtype) {
    case DType::F32:
      return 4;
    case DType::F16:
    case DType::BF16:
      return 2;
    case DType::Q8_0:
      return sizeof(BlockQ8_0);
    case DType::Q4_0:
      return sizeof(BlockQ4_0);
    case DType::Q4_1:
      return sizeof(BlockQ4_1);
    case DType::Q5_0:
      return sizeof(BlockQ5_0);
    case DType::Q5_1:
      return sizeof(BlockQ5_1);
    case DType::Q8_1:
      return sizeof(BlockQ8_1);
    case DType::Q2_K:
      return sizeof(BlockQ2_K);
    case DType::Q3_K:
      return sizeof(BlockQ3_K);
    case DType::Q4_K:
      return sizeof(BlockQ4_K);
    case DType::Q5_K:
      return sizeof(BlockQ5_K);
    case DType::Q6_K:
      return sizeof(BlockQ6_K);
    case DType::Q8_K:
      return sizeof(BlockQ8_K);
    case DType::IQ4_NL:
      return sizeof(BlockIQ4_NL);
    case DType::IQ4_XS:
      return sizeof(BlockIQ4_XS);
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

DType dtype_fitting_row(DType wanted, int64_t cols, DType float_fallback) {
  if (cols % dtype_block_elems(wanted) == 0) return wanted;
  DType next = float_fallback;
  switch (wanted) {
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::IQ4_XS:
      next = DType::IQ4_NL;
      break;
    case DType::Q4_K:
      next = DType::Q5_0;
      break;
    case DType::Q5_K:
      next = DType::Q5_1;
      break;
    case DType::Q6_K:
    case DType::Q8_K:
      next = DType::Q8_0;
      break;
    default:
      break;
  }
  return cols % dtype_block_elems(next) == 0 ? next : float_fallback;
}

bool dtype_is_quantized(DType dtype) {
  return dtype != DType::F32 && dtype != DType::F16 && dtype != DType::BF16;
}

}  // namespace ember
