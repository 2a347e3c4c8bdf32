// AVX-512 (VNNI) matmul on 8-bit activations for
// q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl/q2_k..q6_k/iq4_xs: Interleaved8 matrices (what the loader
// makes) run the shared interleaved tiles with vpdpbusd (AVX512_VNNI on 256-bit vectors, the 8-row
// groups filling one exactly); q8_0 and q4_0 with more than 4 tokens run two groups per 512-bit
// vector (EMBER_TILE_WIDE: the same integers and bits; on Zen 5, which executes 512-bit ops whole,
// SmolLM2-shaped q8_0 prefill of 512 tokens went 1,471 -> 1,947 tok/s); Rows-layout matrices
// (--no-interleave) keep the AVX2 kernel.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "ember/backend/cpu/avx2_prefetch.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/avx512_util.h"
#include "ember/backend/cpu/kernels_isa.h"
#include "ember/backend/cpu/weight_layout.h"

namespace ember::cpu::avx512 {
namespace {

using avx2::LinePrefetcher;
using avx2::load_u32;

constexpr bool kUseVnni = true;
// Tiles of several tokens prefetch the weights they stream where the T = 1 tiles' prefetch is
// what reaches the memory's bandwidth (Intel; avx512_util.h).
bool multi_token_stream_prefetch() {
  return decode_stream_prefetch();
}
#define EMBER_TILE EMBER_AVX512
#define EMBER_TILE_INLINE EMBER_AVX512_INLINE
#define EMBER_TILE_WIDE 1
#include "ember/backend/cpu/matmul_interleaved_tiles.inc"
#undef EMBER_TILE_WIDE
#undef EMBER_TILE
#undef EMBER_TILE_INLINE

}  // namespace

void matmul_q8(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y, int64_t ldy,
               int64_t row_begin, int64_t row_end) {
  if (w.layout != WeightLayout::Interleaved8) {
    return avx2::matmul_q8(xq, T, w, y, ldy, row_begin, row_end);
  }
  if (row_begin >= row_end) return;
  return matmul_any_dtype(xq, T, w, y, ldy, row_begin, row_end);
}

}  // namespace ember::cpu::avx512
