// The non-linear 4-bit types: every value is a scale times one of the 16 levels of kIq4nlValues
// (-127..113, denser near zero; layouts in quant_blocks.h).
//   iq4_nl: blocks of 32, one f16 scale: fit_scale over the grid. The grid is lopsided, so the
//     search tries the block's extreme on both ends (-127 and 113): either sign of the scale.
//   iq4_xs: super-blocks of 256 in 8 sub-blocks of 32, value = d * (ls - 32) * level with 6-bit
//     ls: quantize_symmetric_super with integer sub-scales in -32..31.
// Element j of a block of 32 keeps its nibble in byte j % 16 (the low nibble for j < 16).
#include <cstring>

#include "ember/core/quantize_blocks.h"

namespace ember::quant {
namespace {

void pack_nibbles(const uint8_t* idx, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = static_cast<uint8_t>(idx[j] | idx[j + 16] << 4);
}

}  // namespace

void quantize_row_iq4_nl(const float* x, void* out, int64_t n) {
  const Levels grid = Levels::iq4nl();
  for (int64_t b = 0; b < n / 32; ++b) {
    const float* xb = x + 32 * b;
    BlockIQ4_NL blk{};
    blk.d = f16_finite(fit_scale(xb, 32, grid).scale);
    uint8_t idx[32];
    snap_to_scale(xb, 32, f16_to_f32(blk.d), grid, idx);
    pack_nibbles(idx, blk.qs);
    std::memcpy(static_cast<uint8_t*>(out) + b * static_cast<int64_t>(sizeof blk), &blk,
                sizeof blk);
  }
}

// Scale ls of sub-block ib: low 4 bits in nibble ib % 2 of scales_l[ib / 2], top 2 bits at bits
// 2 * ib of scales_h.
void quantize_row_iq4_xs(const float* x, void* out, int64_t n) {
  const Levels grid = Levels::iq4nl();
  for (int64_t b = 0; b < n / kSuperBlock; ++b) {
    const SymmetricSuper s = quantize_symmetric_super(x + kSuperBlock * b, 32, grid, -32, 31);
    BlockIQ4_XS blk{};
    blk.d = f16_finite(s.d);
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = s.scales[ib] + 32;
      blk.scales_l[ib / 2] =
          static_cast<uint8_t>(blk.scales_l[ib / 2] | (ls & 0x0f) << (4 * (ib % 2)));
      blk.scales_h = static_cast<uint16_t>(blk.scales_h | (ls >> 4) << (2 * ib));
      pack_nibbles(s.idx + 32 * ib, blk.qs + 16 * ib);
    }
    std::memcpy(static_cast<uint8_t*>(out) + b * static_cast<int64_t>(sizeof blk), &blk,
                sizeof blk);
  }
}

}  // namespace ember::quant
