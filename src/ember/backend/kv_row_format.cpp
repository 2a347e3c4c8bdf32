#include "ember/backend/kv_row_format.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "ember/core/error.h"
#include "ember/core/half.h"

namespace ember {

namespace {

// One q8_0 group: x [g] -> f16 scale + g int8.
void write_q8_group(const float* x, int64_t g, uint8_t* out) {
  float amax = 0.0f;
  for (int64_t j = 0; j < g; ++j) amax = std::max(amax, std::fabs(x[j]));
  // The quants use the exact float scale; only the stored scale is rounded to f16.
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t dh = f32_to_f16(d);
  std::memcpy(out, &dh, 2);
  auto* q = reinterpret_cast<int8_t*>(out + 2);
  for (int64_t j = 0; j < g; ++j) q[j] = static_cast<int8_t>(std::round(x[j] * id));
}

// One q4_0 group: x [g] -> f16 scale + g/2 bytes of nibble pairs (j, j + g/2).
void write_q4_group(const float* x, int64_t g, uint8_t* out) {
  float amax = 0.0f, max = 0.0f;
  for (int64_t j = 0; j < g; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  const uint16_t dh = f32_to_f16(d);
  std::memcpy(out, &dh, 2);
  const int64_t half = g / 2;
  for (int64_t j = 0; j < half; ++j) {
    // x * id + 8.5 lies in [0.5, 16.5]: truncation rounds x * id + 8 half-up.
    const int lo = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
    const int hi = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + half] * id + 8.5f)));
    out[2 + j] = static_cast<uint8_t>(lo | (hi << 4));
  }
}

float group_scale(const uint8_t* group) {
  uint16_t dh;
  std::memcpy(&dh, group, 2);
  return f16_to_f32(dh);
}

int64_t group_bytes(DType dtype, int64_t g) {
  return 2 + (dtype == DType::Q8_0 ? g : g / 2);
}

}  // namespace

bool kv_dtype_supported(DType dtype) {
  switch (dtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16:
    case DType::Q8_0:
    case DType::Q4_0:
      return true;
    default:
      return false;
  }
}

int64_t kv_quant_group(int64_t head_dim) {
  for (int64_t g : {32, 16, 8}) {
    if (head_dim > 0 && head_dim % g == 0) return g;
  }
  return 0;
}

std::string kv_dtype_problem(DType dtype, int64_t head_dim) {
  if (!kv_dtype_supported(dtype)) {
    return std::string("a KV cache cannot be stored as ") + dtype_name(dtype) +
           " (expected f32, f16, bf16, q8_0 or q4_0)";
  }
  if ((dtype == DType::Q8_0 || dtype == DType::Q4_0) && kv_quant_group(head_dim) == 0) {
    return std::string("a ") + dtype_name(dtype) +
           " KV cache needs head_dim a multiple of 8; this " + "model's is " +
           std::to_string(head_dim);
  }
  return "";
}

int64_t kv_row_bytes(DType dtype, int64_t head_dim) {
  switch (dtype) {
    case DType::F32:
      return head_dim * 4;
    case DType::F16:
    case DType::BF16:
      return head_dim * 2;
    case DType::Q8_0:
    case DType::Q4_0: {
      const int64_t g = kv_quant_group(head_dim);
      if (g == 0) throw Error(kv_dtype_problem(dtype, head_dim));
      return head_dim / g * group_bytes(dtype, g);
    }
    default:
      throw Error(kv_dtype_problem(dtype, head_dim));
  }
}

double kv_bytes_per_value(DType dtype, int64_t head_dim) {
  return static_cast<double>(kv_row_bytes(dtype, head_dim)) / static_cast<double>(head_dim);
}

void kv_write_row(const float* x, int64_t head_dim, DType dtype, void* out) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(out, x, static_cast<size_t>(head_dim) * sizeof(float));
      return;
    case DType::F16:
      for (int64_t d = 0; d < head_dim; ++d) static_cast<uint16_t*>(out)[d] = f32_to_f16(x[d]);
      return;
    case DType::BF16:
      for (int64_t d = 0; d < head_dim; ++d) static_cast<uint16_t*>(out)[d] = f32_to_bf16(x[d]);
      return;
    case DType::Q8_0:
    case DType::Q4_0: {
      const int64_t g = kv_quant_group(head_dim), bytes = group_bytes(dtype, g);
      auto* o = static_cast<uint8_t*>(out);
      for (int64_t b = 0; b < head_dim / g; ++b) {
        if (dtype == DType::Q8_0) {
          write_q8_group(x + b * g, g, o + b * bytes);
        } else {
          write_q4_group(x + b * g, g, o + b * bytes);
        }
      }
      return;
    }
    default:
      throw Error(kv_dtype_problem(dtype, head_dim));
  }
}

void kv_read_row(const void* row, int64_t head_dim, DType dtype, float* out) {
  switch (dtype) {
    case DType::F32:
      std::memcpy(out, row, static_cast<size_t>(head_dim) * sizeof(float));
      return;
    case DType::F16:
      for (int64_t d = 0; d < head_dim; ++d)
        out[d] = f16_to_f32(static_cast<const uint16_t*>(row)[d]);
      return;
    case DType::BF16:
      for (int64_t d = 0; d < head_dim; ++d) {
        out[d] = bf16_to_f32(static_cast<const uint16_t*>(row)[d]);
      }
      return;
    case DType::Q8_0:
    case DType::Q4_0: {
      const int64_t g = kv_quant_group(head_dim), bytes = group_bytes(dtype, g), half = g / 2;
      const auto* r = static_cast<const uint8_t*>(row);
      for (int64_t b = 0; b < head_dim / g; ++b) {
        const uint8_t* grp = r + b * bytes;
        const float d = group_scale(grp);
        float* o = out + b * g;
        if (dtype == DType::Q8_0) {
          const auto* q = reinterpret_cast<const int8_t*>(grp + 2);
          for (int64_t j = 0; j < g; ++j) o[j] = d * static_cast<float>(q[j]);
        } else {
          for (int64_t j = 0; j < half; ++j) {
            o[j] = d * static_cast<float>((grp[2 + j] & 0x0F) - 8);
            o[j + half] = d * static_cast<float>((grp[2 + j] >> 4) - 8);
          }
        }
      }
      return;
    }
    default:
      throw Error(kv_dtype_problem(dtype, head_dim));
  }
}

void kv_rotate(float* x, int64_t head_dim) {
  const int64_t g = kv_quant_group(head_dim);
  if (g == 0)
    throw Error("--kv-rotate needs head_dim a multiple of 8; this model's is " +
                std::to_string(head_dim));
  const float norm = 1.0f / std::sqrt(static_cast<float>(g));
  for (int64_t b = 0; b < head_dim; b += g) {
    float* v = x + b;
    // Fast Walsh-Hadamard transform: log2(g) butterfly passes.
    for (int64_t len = 1; len < g; len *= 2) {
      for (int64_t i = 0; i < g; i += 2 * len) {
        for (int64_t j = i; j < i + len; ++j) {
          const float a = v[j], c = v[j + len];
          v[j] = a + c;
          v[j + len] = a - c;
        }
      }
    }
    for (int64_t j = 0; j < g; ++j) v[j] *= norm;
  }
}

}  // namespace ember
