#include "ember/backend/cpu/weight_layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ember/core/error.h"

namespace ember::cpu {

int64_t weight_matrix_bytes(DType dtype, int64_t n_rows, int64_t n_cols, WeightLayout layout) {
  int64_t rows = n_rows;
  if (layout == WeightLayout::Interleaved8) {
    rows = (n_rows + kInterleavedRows - 1) / kInterleavedRows * kInterleavedRows;
  }
  return rows * dtype_row_bytes(dtype, n_cols);
}

WeightMatrix interleave_rows(const WeightMatrix& src, void* dst) {
  if (src.layout != WeightLayout::Rows || !has_interleaved_layout(src.dtype)) {
    throw Error("interleave_rows: want a q8_0/q4_0 matrix in the Rows layout");
  }
  const int64_t rb = src.row_bytes, nb = src.n_cols / kQuantBlock;
  const int64_t group_bytes = kInterleavedRows * rb;
  std::vector<uint8_t> rows(static_cast<size_t>(group_bytes));  // one group's source rows
  const auto* in = static_cast<const uint8_t*>(src.data);
  auto* out = static_cast<uint8_t*>(dst);
  for (int64_t g0 = 0; g0 < src.n_rows; g0 += kInterleavedRows) {
    const int64_t n = std::min(kInterleavedRows, src.n_rows - g0);
    std::memset(rows.data(), 0, rows.size());  // padding rows: scale 0, quants 0
    std::memcpy(rows.data(), in + g0 * rb, static_cast<size_t>(n * rb));
    uint8_t* group = out + g0 * rb;
    for (int64_t b = 0; b < nb; ++b) {
      for (int r = 0; r < kInterleavedRows; ++r) {
        const uint8_t* row = rows.data() + r * rb;
        if (src.dtype == DType::Q4_0) {
          const BlockQ4_0& from = reinterpret_cast<const BlockQ4_0*>(row)[b];
          auto& to = reinterpret_cast<BlockQ4_0x8*>(group)[b];
          to.d[r] = from.d;
          for (int c = 0; c < 4; ++c) std::memcpy(to.qs[c][r], from.qs + 4 * c, 4);
        } else {
          const BlockQ8_0& from = reinterpret_cast<const BlockQ8_0*>(row)[b];
          auto& to = reinterpret_cast<BlockQ8_0x8*>(group)[b];
          to.d[r] = from.d;
          for (int c = 0; c < 8; ++c) std::memcpy(to.qs[c][r], from.qs + 4 * c, 4);
        }
      }
    }
  }
  WeightMatrix view = src;
  view.data = dst;
  view.layout = WeightLayout::Interleaved8;
  return view;
}

namespace {

// Block b of `row` in either layout; Block is BlockQ4_0 or BlockQ8_0, BlockX8 its interleaved
// counterpart (4-byte pieces of qs, row r's piece c at qs[c][r]).
template <typename Block, typename BlockX8>
Block row_block(const WeightMatrix& w, int64_t row, int64_t b) {
  if (w.layout == WeightLayout::Rows) {
    return reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w.data) +
                                          row * w.row_bytes)[b];
  }
  const auto& blk = reinterpret_cast<const BlockX8*>(interleaved_group(w, row))[b];
  const int64_t r = row % kInterleavedRows;
  Block out;
  out.d = blk.d[r];
  for (size_t c = 0; c < sizeof(out.qs) / 4; ++c) std::memcpy(out.qs + 4 * c, blk.qs[c][r], 4);
  return out;
}

}  // namespace

BlockQ4_0 q4_0_block(const WeightMatrix& w, int64_t row, int64_t b) {
  return row_block<BlockQ4_0, BlockQ4_0x8>(w, row, b);
}

BlockQ8_0 q8_0_block(const WeightMatrix& w, int64_t row, int64_t b) {
  return row_block<BlockQ8_0, BlockQ8_0x8>(w, row, b);
}

}  // namespace ember::cpu
