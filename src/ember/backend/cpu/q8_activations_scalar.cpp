// Quantized-weight matmul against 8-bit activations: the reference (reference::, exact integer
// block sums, double accumulation) and the portable scalar path (scalar::, float accumulation in
// block order). Activations: per block of 32, d = max|x| / 127, q = round(x / d).
#include <cmath>
#include <vector>

#include "ember/backend/cpu/kernels_isa.h"
#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/backend/cpu/weight_layout.h"
#include "ember/backend/reference/reference_kernels.h"
#include "ember/core/half.h"

namespace ember::cpu {
namespace {

void quantize_block(const float* x, BlockQ8Act& out) {
  float amax = 0.0f;
  for (int i = 0; i < kQuantBlock; ++i) amax = std::max(amax, std::fabs(x[i]));
  const float d = amax / 127.0f;
  const float inv = d != 0.0f ? 1.0f / d : 0.0f;
  int32_t sum = 0;
  for (int i = 0; i < kQuantBlock; ++i) {
    out.qs[i] = static_cast<int8_t>(std::nearbyint(x[i] * inv));
    sum += out.qs[i];
  }
  out.d = d;
  out.sum = sum;
}

// The block's weights as signed integers.
void weight_block(const WeightMatrix& w, int64_t row, int64_t block, int8_t q[32], float* d) {
  if (w.dtype == DType::Q8_0) {
    const BlockQ8_0 b = q8_0_block(w, row, block);
    for (int i = 0; i < kQuantBlock; ++i) q[i] = b.qs[i];
    *d = f16_to_f32(b.d);
  } else {
    const BlockQ4_0 b = q4_0_block(w, row, block);
    for (int j = 0; j < 16; ++j) {
      q[j] = static_cast<int8_t>((b.qs[j] & 0x0f) - 8);
      q[j + 16] = static_cast<int8_t>((b.qs[j] >> 4) - 8);
    }
    *d = f16_to_f32(b.d);
  }
}

int32_t block_dot(const int8_t* a, const int8_t* b) {
  int32_t s = 0;
  for (int i = 0; i < kQuantBlock; ++i) s += static_cast<int32_t>(a[i]) * b[i];
  return s;
}

// matmul_q8_row_dots for either layout: an interleaved matrix (q5_0, iq4_nl) is read back one row
// at a time as its Rows-layout bytes, so it never reaches a row dot interleaved.
void row_dots_any_layout(QuantRowDot dot, const BlockQ8Act* xq, int64_t T, const WeightMatrix& w,
                         float* y, int64_t ldy, int64_t row_begin, int64_t row_end) {
  if (w.layout == WeightLayout::Rows) {
    return matmul_q8_row_dots(dot, nullptr, xq, T, w, y, ldy, row_begin, row_end);
  }
  std::vector<uint8_t> row(static_cast<size_t>(w.row_bytes));
  WeightMatrix one = w;
  one.data = row.data();
  one.n_rows = 1;
  one.layout = WeightLayout::Rows;
  for (int64_t n = row_begin; n < row_end; ++n) {
    rows_layout_row(w, n, row.data());
    matmul_q8_row_dots(dot, nullptr, xq, T, one, y + n, ldy, 0, 1);
  }
}

}  // namespace

}  // namespace ember::cpu

// The reference backend's versions (declared in reference_kernels.h), beside the scalar ones they
// share block helpers with.
namespace ember::reference {
using namespace ember::cpu;

void quantize_activations(const float* x, int64_t T, int64_t K, BlockQ8Act* out) {
  for (int64_t i = 0; i < T * (K / kQuantBlock); ++i) quantize_block(x + i * kQuantBlock, out[i]);
}

void matmul_q8(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
               int64_t row_begin, int64_t row_end) {
  if (QuantRowDot dot = scalar::quant_row_dot(w.dtype)) {  // the other block types: exact
    return row_dots_any_layout(dot, xq, T, w, y, ldy, row_begin, row_end);
  }
  const int64_t nb = w.n_cols / kQuantBlock;
  int8_t q[32];
  float dw;
  for (int64_t n = row_begin; n < row_end; ++n) {
    for (int64_t t = 0; t < T; ++t) {
      double sum = 0.0;
      for (int64_t b = 0; b < nb; ++b) {
        weight_block(w, n, b, q, &dw);
        const BlockQ8Act& xb = xq[t * nb + b];
        sum += static_cast<double>(dw) * xb.d * block_dot(q, xb.qs);
      }
      y[t * ldy + n] = static_cast<float>(sum);
    }
  }
}

}  // namespace ember::reference

namespace ember::cpu {

namespace scalar {

void quantize_activations(const float* x, int64_t T, int64_t K, BlockQ8Act* out) {
  reference::quantize_activations(x, T, K, out);
}

// Float accumulation, one block after another: the same order whatever T or row range.
void matmul_q8(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
               int64_t row_begin, int64_t row_end) {
  if (QuantRowDot dot = scalar::quant_row_dot(w.dtype)) {
    return row_dots_any_layout(dot, xq, T, w, y, ldy, row_begin, row_end);
  }
  const int64_t nb = w.n_cols / kQuantBlock;
  int8_t q[32];
  float dw;
  for (int64_t n = row_begin; n < row_end; ++n) {
    for (int64_t t = 0; t < T; ++t) {
      float sum = 0.0f;
      for (int64_t b = 0; b < nb; ++b) {
        weight_block(w, n, b, q, &dw);
        const BlockQ8Act& xb = xq[t * nb + b];
        sum += static_cast<float>(block_dot(q, xb.qs)) * (dw * xb.d);
      }
      y[t * ldy + n] = sum;
    }
  }
}

}  // namespace scalar
}  // namespace ember::cpu
