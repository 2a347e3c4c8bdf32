// The scalar row dots of the block types beyond q8_0/q4_0: the weight row dequantized exactly
// (core/dequantize.h, the format's definition), multiplied by the activations' values d * q in
// double. Slow and simple on purpose: it is the oracle the SIMD row dots are tested against, and
// the reference backend's matmul for these types.
#include <vector>

#include "ember/backend/cpu/quant_row_dot.h"
#include "ember/core/dequantize.h"

namespace ember::cpu {

void matmul_q8_row_dots(QuantRowDot dot, QuantRowDot4 dot4, const BlockQ8Act* xq, int64_t T,
                        const WeightMatrix& w, float* y, int64_t ldy, int64_t row_begin,
                        int64_t row_end) {
  const int64_t nb = w.n_cols / kQuantBlock;
  const auto* base = static_cast<const uint8_t*>(w.data);
  int64_t n = row_begin;
  if (dot4 != nullptr) {
    for (; n + 4 <= row_end; n += 4) {
      for (int64_t t = 0; t < T; ++t) {
        dot4(base + n * w.row_bytes, w.row_bytes, xq + t * nb, w.n_cols, y + t * ldy + n);
      }
    }
  }
  for (; n < row_end; ++n) {
    for (int64_t t = 0; t < T; ++t) {
      y[t * ldy + n] = dot(base + n * w.row_bytes, xq + t * nb, w.n_cols);
    }
  }
}

namespace scalar {

float quant_row_dot_exact(DType dtype, const uint8_t* row, const BlockQ8Act* x, int64_t K) {
  thread_local std::vector<float> w;
  if (static_cast<int64_t>(w.size()) < K) w.resize(static_cast<size_t>(K));
  dequantize_row(dtype, row, w.data(), K);
  double sum = 0.0;
  for (int64_t b = 0; b < K / kQuantBlock; ++b) {
    double block = 0.0;
    for (int i = 0; i < kQuantBlock; ++i) {
      block += static_cast<double>(w[b * kQuantBlock + i]) * x[b].qs[i];
    }
    sum += block * x[b].d;
  }
  return static_cast<float>(sum);
}

namespace {
template <DType kDtype>
float exact(const uint8_t* row, const BlockQ8Act* x, int64_t K) {
  return quant_row_dot_exact(kDtype, row, x, K);
}
}  // namespace

QuantRowDot quant_row_dot(DType dtype) {
  switch (dtype) {
    case DType::Q4_1:
      return exact<DType::Q4_1>;
    case DType::Q5_0:
      return exact<DType::Q5_0>;
    case DType::Q5_1:
      return exact<DType::Q5_1>;
    case DType::Q8_1:
      return exact<DType::Q8_1>;
    case DType::Q2_K:
      return exact<DType::Q2_K>;
    case DType::Q3_K:
      return exact<DType::Q3_K>;
    case DType::Q4_K:
      return exact<DType::Q4_K>;
    case DType::Q5_K:
      return exact<DType::Q5_K>;
    case DType::Q6_K:
      return exact<DType::Q6_K>;
    case DType::Q8_K:
      return exact<DType::Q8_K>;
    case DType::IQ4_NL:
      return exact<DType::IQ4_NL>;
    case DType::IQ4_XS:
      return exact<DType::IQ4_XS>;
    default:
      return nullptr;  // float types; q8_0/q4_0 have their own kernels
  }
}

}  // namespace scalar
}  // namespace ember::cpu
