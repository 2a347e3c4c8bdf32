// The AVX-512 kernel set (Isa::Avx512): bf16 matmuls on vdpbf16ps (avx512_matmul_bf16.cpp; on
// Intel through f32 FMAs with the same products, avx512_matmul_bf16_{gemv_,}fma.cpp),
// quantized matmuls on VNNI int8 dot products (avx512_matmul_q8.cpp) and f32/f16 decode streaming
// rows in address order (avx512_matmul_float.cpp); attention's softmax steps on 512-bit vectors
// (avx512_attention_step.cpp, bit for bit the AVX2 ones: at long contexts attention is most of a
// decode step and compute-bound); every other kernel is the AVX2 one (the table in kernels.cpp
// points there). Elementwise ops on 135M-class shapes are a few percent of a step and memory- or
// latency-bound, and the f32/f16 prefill GEMM gains nothing from 512-bit FMAs on CPUs that split
// them into two 256-bit halves (AMD Zen 4), so those stay on one tested implementation; on Intel
// its inner tile runs on zmm (avx512_panel_lanes.cpp, the same bits).
#include "ember/backend/cpu/avx512_matmul_bf16.h"
#include "ember/backend/cpu/avx512_matmul_float.h"
#include "ember/backend/cpu/kernels_isa.h"
#include "ember/core/aligned_vector.h"

namespace ember::cpu::avx512 {
namespace {

// f32/f16 weights below kGemmMinTokens run the row-ordered decode kernel, on x as it is (which is
// also their prepared layout, [T, K]).
bool runs_float_gemv(const WeightMatrix& w, int64_t T) {
  return (w.dtype == DType::F32 || w.dtype == DType::F16) && T < kGemmMinTokens;
}

// bf16 from 2 to kGemmMinTokens - 1 tokens on CPUs whose FMAs do twice vdpbf16ps's flops (Intel):
// the FMA decode kernel on activations widened back from bf16 (the same bits). One token streams
// the weights, which vdpbf16ps keeps up with: it stays on the dot-product kernel.
bool bf16_decode_on_fma(int64_t T) {
  return T > 1 && T < kGemmMinTokens && bf16_prefill_uses_fma();
}

}  // namespace

int64_t prepared_activation_floats(DType dtype, int64_t T, int64_t K) {
  if (dtype == DType::BF16 && bf16_decode_on_fma(T)) return bf16_widened_floats(T, K);
  if (dtype == DType::BF16) return bf16_prepared_floats(T, K);
  return avx2::prepared_activation_floats(dtype, T, K);
}

void prepare_activations(DType dtype, const float* x, int64_t T, int64_t K, int64_t token_begin,
                         int64_t token_end, float* xp) {
  if (dtype == DType::BF16 && bf16_decode_on_fma(T)) {
    return bf16_prepare_widened(x, K, token_begin, token_end, xp);
  }
  if (dtype == DType::BF16) return bf16_prepare(x, T, K, token_begin, token_end, xp);
  avx2::prepare_activations(dtype, x, T, K, token_begin, token_end, xp);
}

void matmul_prepared(const float* xp, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
                     int64_t row_begin, int64_t row_end) {
  if (w.dtype == DType::BF16 && bf16_decode_on_fma(T)) {
    return bf16_gemv_fma(xp, T, w, y, ldy, row_begin, row_end);
  }
  if (w.dtype == DType::BF16) return bf16_matmul_prepared(xp, T, w, y, ldy, row_begin, row_end);
  if (uses_8bit_activations(w, T)) return avx512::matmul(xp, T, w, y, ldy, row_begin, row_end);
  if (runs_float_gemv(w, T)) return float_gemv(xp, T, w, y, ldy, row_begin, row_end);
  avx2::matmul_prepared(xp, T, w, y, ldy, row_begin, row_end);
}

void matmul(const float* x, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
            int64_t row_begin, int64_t row_end) {
  if (uses_8bit_activations(w, T)) {
    thread_local AlignedVector<BlockQ8Act> xq;
    const size_t blocks = static_cast<size_t>(T * (w.n_cols / kQuantBlock));
    if (xq.size() < blocks) xq.resize(blocks);
    avx2::quantize_activations(x, T, w.n_cols, xq.data());
    avx512::matmul_q8(xq.data(), T, w, y, ldy, row_begin, row_end);
    return;
  }
  if (runs_float_gemv(w, T)) return float_gemv(x, T, w, y, ldy, row_begin, row_end);
  if (w.dtype != DType::BF16) return avx2::matmul(x, T, w, y, ldy, row_begin, row_end);
  // One-off callers; the forward pass prepares once per input (matmul_prepared).
  thread_local AlignedVector<float> prepared;
  const int64_t floats = prepared_activation_floats(DType::BF16, T, w.n_cols);
  if (static_cast<int64_t>(prepared.size()) < floats) prepared.resize(static_cast<size_t>(floats));
  prepare_activations(DType::BF16, x, T, w.n_cols, 0, T, prepared.data());
  matmul_prepared(prepared.data(), T, w, y, ldy, row_begin, row_end);
}

}  // namespace ember::cpu::avx512
