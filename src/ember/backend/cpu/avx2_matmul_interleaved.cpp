// AVX2 quantized matmul on Interleaved8 weights: 8 rows x NT tokens per tile, one row per 32-bit
// lane.
//
// A 32-byte load of an interleaved block holds 4 consecutive quant bytes of each of the 8 rows;
// the activation's matching 4 bytes are broadcast to all lanes, so maddubs + madd leave row r's
// partial dot product in lane r. After the block's 32 values the lanes hold the 8 exact integer
// block dots; they are converted to f32 once and accumulated with the 8 rows' scales (one f16 ->
// f32 conversion of 8 scales) times the activation scale:
//   y[t, n] = sum_b float(dot_b(n, t)) * (d_w(n, b) * d_x(t, b)),   b in increasing order.
// Compared with the Rows-layout kernel (avx2_matmul_q8.cpp) that needs no horizontal sums and
// converts a scale per 8 rows instead of per row: about half the instructions per weight byte
// (q4_0 GEMV in L2, one thread: 10-12 -> 27-31 GB/s).
//
//   q4_0: nibbles u = w + 8 in 0..15 times activations |x| <= 127: a maddubs lane (two products)
//         is at most 3810 in magnitude, so the 8 maddubs of a block (4 chunks x low/high nibbles)
//         are summed in int16 (<= 30480) before one madd; the offset is taken back as 8 * sum(x).
//   q5_0: u = nibble | fifth bit << 4 in 0..31 (the fifth bits shifted into place from one
//         rearranged word per row, weight_layout.h): a maddubs lane is at most 2 * 31 * 127 =
//         7874, so 4 are summed in int16 (<= 31496) before each madd; offset 16 * sum(x).
//   q4_1 / q5_1: u as q4_0 / q5_0 (same int16 bounds), no offset; the 8 rows' f16 mins add
//         m * d_x * sum(x) per block.
//   q8_0: the sign trick (|w| times x carrying w's sign); a maddubs lane can reach 2 * 127 * 128,
//         so each chunk is widened by madd before it is summed.
//   iq4_nl: nibbles mapped to the levels kIq4nlValues (-127..113) by a byte shuffle, then the sign
//         trick as q8_0 (a maddubs lane up to 2 * 127 * 127 = 32258: one fits, two do not).
//   q4_k / q5_k / q6_k: super-blocks of 256 against 8 activation blocks; each sub-block's exact
//         integer dot is scaled by the rows' integer sub-block scales before it is converted
//         (matmul_interleaved_kquant_tiles.inc). Against the row-by-row K-quant dots they replace,
//         one thread in L2 (`ember_kernel_bench --benchmark_filter=BlockTypes`, 1536 x 576):
//         q4_k 37 -> 58-82 GFLOP/s, q5_k 24-26 -> 42-57, q6_k 32-34 -> 40-54 (noisy VM).
//
// Determinism: each output's sum runs over blocks in order with exact integer block dots, the same
// for every NT, tile and row range, so any T gives the same bits (interleaved matrices take 8-bit
// activations at every T: prefill runs these tiles too, ~1.4x the f32 GEMM on dequantized panels).
#include "ember/backend/cpu/avx2_matmul_interleaved.h"

#include <algorithm>
#include <type_traits>
#include <vector>

#include "ember/backend/cpu/avx2_prefetch.h"
#include "ember/backend/cpu/avx2_util.h"
#include "ember/backend/cpu/weight_layout.h"

namespace ember::cpu::avx2 {
namespace {

constexpr bool kUseVnni = false;
// Tiles of several tokens leave the streaming to the hardware prefetcher here, as measured on AMD.
constexpr bool multi_token_stream_prefetch() {
  return false;
}
#define EMBER_TILE EMBER_AVX2
#define EMBER_TILE_INLINE EMBER_AVX2_INLINE
#include "ember/backend/cpu/matmul_interleaved_tiles.inc"
#undef EMBER_TILE
#undef EMBER_TILE_INLINE

}  // namespace

void matmul_q8_interleaved(const BlockQ8Act* xq, int64_t T, const WeightMatrix& w, float* y,
                           int64_t ldy, int64_t row_begin, int64_t row_end) {
  if (row_begin >= row_end) return;
  return matmul_any_dtype(xq, T, w, y, ldy, row_begin, row_end);
}

}  // namespace ember::cpu::avx2
