// GGML's block types decoded on the device, 32 values at a time, from the Rows layout a file stores
// them in (core/quant_blocks.h has the layouts and the shared scale helpers; core/dequantize.cpp
// the host spec these follow). Group g of a row holds its values 32g .. 32g + 31: for the
// 256-value super-blocks that is sub-range g % 8 of super-block g / 8.
#pragma once

#include <cstdint>

#include "ember/backend/cuda/device_math.cuh"
#include "ember/core/quant_blocks.h"

namespace ember::cuda {

static __constant__ int8_t kIq4nlLevels[16] = {
    kIq4nlValues[0],  kIq4nlValues[1],  kIq4nlValues[2],  kIq4nlValues[3],
    kIq4nlValues[4],  kIq4nlValues[5],  kIq4nlValues[6],  kIq4nlValues[7],
    kIq4nlValues[8],  kIq4nlValues[9],  kIq4nlValues[10], kIq4nlValues[11],
    kIq4nlValues[12], kIq4nlValues[13], kIq4nlValues[14], kIq4nlValues[15]};

__device__ __forceinline__ int legacy_nibble(const uint8_t* qs, int j) {
  return j < 16 ? (qs[j] & 0x0f) : (qs[j - 16] >> 4);
}

__device__ __forceinline__ uint32_t load_u32_unaligned(const uint8_t* p) {
  return p[0] | (p[1] << 8) | (p[2] << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

// Values 32g .. 32g + 31 of the row starting at `row` (dtype one of is_group_dtype's).
__device__ inline void dequantize_group(DType dtype, const uint8_t* row, int64_t g, float* y) {
  switch (dtype) {
    case DType::Q4_1: {
      const auto& b = reinterpret_cast<const BlockQ4_1*>(row)[g];
      const float d = f16_bits_to_float(b.d), m = f16_bits_to_float(b.m);
      for (int j = 0; j < 32; ++j) y[j] = d * legacy_nibble(b.qs, j) + m;
      return;
    }
    case DType::Q5_0:
    case DType::Q5_1: {
      const bool q5_1 = dtype == DType::Q5_1;
      const uint8_t* base = row + g * (q5_1 ? sizeof(BlockQ5_1) : sizeof(BlockQ5_0));
      const float d = f16_bits_to_float(*reinterpret_cast<const uint16_t*>(base));
      const float m = q5_1 ? f16_bits_to_float(*reinterpret_cast<const uint16_t*>(base + 2)) : 0.0f;
      const uint8_t* qh = base + (q5_1 ? 4 : 2);
      const uint8_t* qs = qh + 4;
      const uint32_t bits = load_u32_unaligned(qh);
      for (int j = 0; j < 32; ++j) {
        const int q = legacy_nibble(qs, j) | static_cast<int>((bits >> j) & 1) << 4;
        y[j] = q5_1 ? d * q + m : d * (q - 16);
      }
      return;
    }
    case DType::IQ4_NL: {
      const auto& b = reinterpret_cast<const BlockIQ4_NL*>(row)[g];
      const float d = f16_bits_to_float(b.d);
      for (int j = 0; j < 32; ++j) y[j] = d * kIq4nlLevels[legacy_nibble(b.qs, j)];
      return;
    }
    case DType::Q2_K: {
      const auto& b = reinterpret_cast<const BlockQ2_K*>(row)[g / 8];
      const float d = f16_bits_to_float(b.d), dmin = f16_bits_to_float(b.dmin);
      const int e0 = 32 * static_cast<int>(g % 8), h = e0 / 128, s = (e0 % 128) / 32;
      for (int l = 0; l < 32; ++l) {
        const int sub = (e0 + l) / 16;
        const int q = (b.qs[32 * h + l] >> (2 * s)) & 3;
        y[l] = d * (b.scales[sub] & 0x0f) * q - dmin * (b.scales[sub] >> 4);
      }
      return;
    }
    case DType::Q3_K: {
      const auto& b = reinterpret_cast<const BlockQ3_K*>(row)[g / 8];
      const float d = f16_bits_to_float(b.d);
      const int e0 = 32 * static_cast<int>(g % 8), h = e0 / 128, s = (e0 % 128) / 32;
      for (int l = 0; l < 32; ++l) {
        const int low = (b.qs[32 * h + l] >> (2 * s)) & 3;
        const bool high = (b.hmask[l] >> (4 * h + s)) & 1;
        y[l] = d * (k3_scale(b.scales, (e0 + l) / 16) - 32) * (low - (high ? 0 : 4));
      }
      return;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      const bool q5 = dtype == DType::Q5_K;
      const uint8_t* base = row + (g / 8) * (q5 ? sizeof(BlockQ5_K) : sizeof(BlockQ4_K));
      const float d = f16_bits_to_float(*reinterpret_cast<const uint16_t*>(base));
      const float dmin = f16_bits_to_float(*reinterpret_cast<const uint16_t*>(base + 2));
      const uint8_t* scales = base + 4;
      const uint8_t* qh = base + 16;  // q5_k only
      const uint8_t* qs = base + (q5 ? 48 : 16);
      const int sub = static_cast<int>(g % 8);
      uint8_t sc, mn;
      k_scale_min(scales, sub, &sc, &mn);
      const float scale = d * sc, offset = dmin * mn;
      for (int l = 0; l < 32; ++l) {
        const uint8_t byte = qs[32 * (sub / 2) + l];
        int q = sub % 2 == 0 ? (byte & 0x0f) : (byte >> 4);
        if (q5) q |= ((qh[l] >> sub) & 1) << 4;
        y[l] = scale * q - offset;
      }
      return;
    }
    case DType::Q6_K: {
      const auto& b = reinterpret_cast<const BlockQ6_K*>(row)[g / 8];
      const float d = f16_bits_to_float(b.d);
      const int e0 = 32 * static_cast<int>(g % 8), h = e0 / 128, s = (e0 % 128) / 32;
      for (int l = 0; l < 32; ++l) {
        const uint8_t lbyte = b.ql[64 * h + 32 * (s % 2) + l];
        const int low = s < 2 ? (lbyte & 0x0f) : (lbyte >> 4);
        const int high = (b.qh[32 * h + l] >> (2 * s)) & 3;
        y[l] = d * b.scales[(e0 + l) / 16] * ((low | high << 4) - 32);
      }
      return;
    }
    case DType::IQ4_XS: {
      const auto& b = reinterpret_cast<const BlockIQ4_XS*>(row)[g / 8];
      const int ib = static_cast<int>(g % 8);
      const float dl = f16_bits_to_float(b.d) * (iq4_xs_scale(b, ib) - 32);
      for (int j = 0; j < 32; ++j) y[j] = dl * kIq4nlLevels[legacy_nibble(b.qs + 16 * ib, j)];
      return;
    }
    default:
      for (int j = 0; j < 32; ++j) y[j] = 0.0f;
  }
}

// Element (r, c) of an uploaded matrix in any dtype the backend keeps (embedding lookups).
__device__ inline float matrix_element_any(const WeightMatrix& w, int64_t r, int64_t c) {
  if (!is_group_dtype(w.dtype)) return matrix_element(w, r, c);
  float group[32];
  dequantize_group(w.dtype, static_cast<const uint8_t*>(w.data) + r * w.row_bytes, c / 32, group);
  return group[c % 32];
}

}  // namespace ember::cuda
