// AVX2 elementwise and per-row kernels: rmsnorm, rope, softmax, silu_mul, gelu_mul, add_inplace,
// store_kv and dequantize_row. Rows whose length is not a multiple of 8 finish with masked
// loads/stores.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/kernels_isa.h"
#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/backend/cpu/weight_layout.h"
#include "ember/backend/kv_row_format.h"
#include "ember/core/half.h"

namespace ember::cpu::avx2 {

// x, y: [T, D] (may alias); weight: [D].
EMBER_AVX2 void rmsnorm(const float* x, const float* weight, float* y, int64_t T, int64_t D,
                        float eps) {
  const __m256i mask = tail_mask(D % 8);
  const int64_t full = D - D % 8;
  for (int64_t t = 0; t < T; ++t) {
    const float* xt = x + t * D;
    float* yt = y + t * D;
    __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= full; i += 16) {
      const __m256 v0 = _mm256_loadu_ps(xt + i), v1 = _mm256_loadu_ps(xt + i + 8);
      a0 = _mm256_fmadd_ps(v0, v0, a0);
      a1 = _mm256_fmadd_ps(v1, v1, a1);
    }
    for (; i < full; i += 8) {
      const __m256 v = _mm256_loadu_ps(xt + i);
      a0 = _mm256_fmadd_ps(v, v, a0);
    }
    if (i < D) {
      const __m256 v = _mm256_maskload_ps(xt + i, mask);
      a1 = _mm256_fmadd_ps(v, v, a1);
    }
    const float ss = hsum(_mm256_add_ps(a0, a1));
    const __m256 inv = _mm256_set1_ps(1.0f / std::sqrt(ss / static_cast<float>(D) + eps));
    for (i = 0; i < full; i += 8) {
      const __m256 v = _mm256_mul_ps(_mm256_loadu_ps(xt + i), inv);
      _mm256_storeu_ps(yt + i, _mm256_mul_ps(v, _mm256_loadu_ps(weight + i)));
    }
    if (i < D) {
      const __m256 v = _mm256_mul_ps(_mm256_maskload_ps(xt + i, mask), inv);
      _mm256_maskstore_ps(yt + i, mask, _mm256_mul_ps(v, _mm256_maskload_ps(weight + i, mask)));
    }
  }
}

// x: [T, n_heads, head_dim] in place. cos/sin depend only on (token, i): computed once per token
// (in float, like HF) and applied to every head 8 pairs at a time.
EMBER_AVX2 void rope(float* x, int64_t T, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                     const int32_t* positions, const float* inv_freq) {
  thread_local std::vector<float> cs_buf;
  const int64_t half = rope_dim / 2;
  if (static_cast<int64_t>(cs_buf.size()) < 2 * half) cs_buf.resize(static_cast<size_t>(2 * half));
  float* cs = cs_buf.data();  // [cos x half, sin x half]
  const __m256i mask = tail_mask(half % 8);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < half; ++i) {
      const float angle = static_cast<float>(positions[t]) * inv_freq[i];
      cs[i] = std::cos(angle);
      cs[half + i] = std::sin(angle);
    }
    for (int64_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * head_dim;
      int64_t i = 0;
      for (; i + 8 <= half; i += 8) {
        const __m256 c = _mm256_loadu_ps(cs + i), s = _mm256_loadu_ps(cs + half + i);
        const __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + half + i);
        _mm256_storeu_ps(v + i, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
        _mm256_storeu_ps(v + half + i, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
      }
      if (i < half) {
        const __m256 c = _mm256_maskload_ps(cs + i, mask);
        const __m256 s = _mm256_maskload_ps(cs + half + i, mask);
        const __m256 a = _mm256_maskload_ps(v + i, mask);
        const __m256 b = _mm256_maskload_ps(v + half + i, mask);
        _mm256_maskstore_ps(v + i, mask, _mm256_fmsub_ps(a, c, _mm256_mul_ps(b, s)));
        _mm256_maskstore_ps(v + half + i, mask, _mm256_fmadd_ps(b, c, _mm256_mul_ps(a, s)));
      }
    }
  }
}

// x: [n] in place.
EMBER_AVX2 void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const __m256i mask = tail_mask(n % 8);
  const int64_t full = n - n % 8;
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i < full; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  float mx = hmax(vmax);
  for (; i < n; ++i) mx = std::max(mx, x[i]);
  const __m256 m = _mm256_set1_ps(mx);
  __m256 sum = _mm256_setzero_ps();
  for (i = 0; i < full; i += 8) {
    const __m256 e = exp(_mm256_sub_ps(_mm256_loadu_ps(x + i), m));
    _mm256_storeu_ps(x + i, e);
    sum = _mm256_add_ps(sum, e);
  }
  if (i < n) {
    // Lanes past the end must add nothing: exp(0 - max) is not 0, so mask them out.
    const __m256 e = _mm256_and_ps(exp(_mm256_sub_ps(_mm256_maskload_ps(x + i, mask), m)),
                                   _mm256_castsi256_ps(mask));
    _mm256_maskstore_ps(x + i, mask, e);
    sum = _mm256_add_ps(sum, e);
  }
  const __m256 inv = _mm256_set1_ps(1.0f / hsum(sum));
  for (i = 0; i < full; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  if (i < n) _mm256_maskstore_ps(x + i, mask, _mm256_mul_ps(_mm256_maskload_ps(x + i, mask), inv));
}

EMBER_AVX2_INLINE __m256 silu_mul8(__m256 g, __m256 u) {
  const __m256 e = exp(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), u);
}

EMBER_AVX2 void silu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(out + i, silu_mul8(_mm256_loadu_ps(gate + i), _mm256_loadu_ps(up + i)));
  }
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    const __m256 r =
        silu_mul8(_mm256_maskload_ps(gate + i, mask), _mm256_maskload_ps(up + i, mask));
    _mm256_maskstore_ps(out + i, mask, r);
  }
}

// gelu(g) = g / (1 + exp(-2u)), u = sqrt(2/pi) (g + 0.044715 g^3): silu's shape with 2u for g.
EMBER_AVX2_INLINE __m256 gelu8(__m256 g) {
  const __m256 g3 = _mm256_mul_ps(_mm256_mul_ps(g, g), g);
  const __m256 u = _mm256_mul_ps(_mm256_set1_ps(-2.0f * 0.7978845608028654f),
                                 _mm256_fmadd_ps(_mm256_set1_ps(0.044715f), g3, g));
  return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), exp(u)));
}

EMBER_AVX2 void gelu_mul(const float* gate, const float* up, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 r = gelu8(_mm256_loadu_ps(gate + i));
    _mm256_storeu_ps(out + i, up != nullptr ? _mm256_mul_ps(r, _mm256_loadu_ps(up + i)) : r);
  }
  if (i < n) {
    const __m256i mask = tail_mask(n - i);
    __m256 r = gelu8(_mm256_maskload_ps(gate + i, mask));
    if (up != nullptr) r = _mm256_mul_ps(r, _mm256_maskload_ps(up + i, mask));
    _mm256_maskstore_ps(out + i, mask, r);
  }
}

EMBER_AVX2 void add_inplace(float* y, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i)));
  }
  for (; i < n; ++i) y[i] += x[i];
}

EMBER_AVX2 void store_kv(const float* x, int64_t n, DType dtype, void* out) {
  if (dtype == DType::F32) {
    std::copy_n(x, n, static_cast<float*>(out));
    return;
  }
  // bf16 and the quantized rows: a few hundred values per token and layer, next to matmuls of
  // millions of multiply-adds; the scalar writer is the format's definition.
  if (dtype != DType::F16) return kv_write_row(x, n, dtype, out);
  auto* o = static_cast<uint16_t*>(out);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(o + i), h);
  }
  for (; i < n; ++i) o[i] = f32_to_f16(x[i]);
}

// Exact conversion of one row, 8 or 32 values at a time.
EMBER_AVX2 void dequantize_row(const WeightMatrix& table, int64_t row, float* out) {
  const uint8_t* base = static_cast<const uint8_t*>(table.data) + row * table.row_bytes;
  const int64_t n = table.n_cols;
  switch (table.dtype) {
    case DType::F32:
    case DType::F16:
    case DType::BF16: {
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
        const __m256 v = table.dtype == DType::F32   ? load8_f32(base, i)
                         : table.dtype == DType::F16 ? load8_f16(base, i)
                                                     : load8_bf16(base, i);
        _mm256_storeu_ps(out + i, v);
      }
      if (i < n)
        _mm256_maskstore_ps(out + i, tail_mask(n - i), load_tail(table.dtype, base, i, n - i));
      break;
    }
    case DType::Q8_0:
    case DType::Q4_0:
      for (int64_t b = 0; b < n / kQuantBlock; ++b) {
        __m256 v[4];
        if (table.layout == WeightLayout::Interleaved8) {
          const uint8_t* group = interleaved_group(table, row);
          const int r = static_cast<int>(row % kInterleavedRows);
          if (table.dtype == DType::Q8_0) {
            load_interleaved_q8_0(reinterpret_cast<const BlockQ8_0x8*>(group) + b, r, v);
          } else {
            load_interleaved_q4_0(reinterpret_cast<const BlockQ4_0x8*>(group) + b, r, v);
          }
        } else if (table.dtype == DType::Q8_0) {
          load_block_q8_0(reinterpret_cast<const BlockQ8_0*>(base) + b, v);
        } else {
          load_block_q4_0(reinterpret_cast<const BlockQ4_0*>(base) + b, v);
        }
        for (int c = 0; c < 4; ++c) _mm256_storeu_ps(out + b * kQuantBlock + 8 * c, v[c]);
      }
      break;
    default:  // the other block types (interleaved q5_0 / iq4_nl: read back as Rows-layout bytes)
      if (table.layout == WeightLayout::Interleaved8) {
        thread_local std::vector<uint8_t> plain;
        plain.resize(static_cast<size_t>(table.row_bytes));
        rows_layout_row(table, row, plain.data());
        base = plain.data();
      }
      dequantize_rows(table.dtype, base, table.row_bytes, 1, n, out, n);
      break;
  }
}

}  // namespace ember::cpu::avx2
