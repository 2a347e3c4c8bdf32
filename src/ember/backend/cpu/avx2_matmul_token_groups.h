// The tokens-in-lanes GEMM behind the AVX2 float matmul for T >= kGroupTokens (see the .cpp).
#pragma once

#include <cstdint>

#include "ember/backend/cpu/avx2_prefetch.h"

namespace ember::cpu::avx2 {

constexpr int64_t kGroupTokens = 16;
// Weight rows per panel_lanes tile (6 rows x 16 tokens: 12 accumulators).
constexpr int64_t kLanesTileRows = 6;

// Tokens [token_begin, token_end) (rows of x, ldx apart, the first at x) into xg [G, K, 16],
// G = ceil(T / 16): group g holds tokens 16g .. 16g + 15 side by side for every k, zeros for tokens
// past T. token_begin is a multiple of 8.
void group_tokens(const float* x, int64_t ldx, int64_t token_begin, int64_t token_end, int64_t K,
                  float* xg);

// y[t, i] for rows [0, rows) of one f32 panel (row i at w + i * ldw, K values) and all T grouped
// tokens xg. prefetch_limit: for weights read from memory (not a converted panel), the end of the
// matrix, so the next rows are prefetched on the first pass; nullptr otherwise. next_panel: for a
// converted panel, a prefetcher of the raw rows the next panel will convert, stepped (K / 4 times
// per tile) during the first group's pass so those bytes arrive while this panel computes; or
// nullptr.
// Whether panel_lanes runs the 512-bit tile (avx512_panel_lanes.h): the AVX-512 or AMX kernel set
// on an Intel CPU. lanes_tile_rows: the rows of the tile it runs then (12) or kLanesTileRows.
bool lanes_on_zmm();
int64_t lanes_tile_rows();

void panel_lanes(const float* xg, int64_t T, int64_t K, const float* w, int64_t ldw, int64_t rows,
                 float* y, int64_t ldy, const uint8_t* prefetch_limit, LinePrefetcher* next_panel);

}  // namespace ember::cpu::avx2
