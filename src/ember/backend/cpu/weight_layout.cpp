#include "ember/backend/cpu/weight_layout.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ember/backend/cpu/amx_weight_tiles.h"
#include "ember/core/error.h"

namespace ember::cpu {

int64_t weight_matrix_bytes(DType dtype, int64_t n_rows, int64_t n_cols, WeightLayout layout) {
  if (layout == WeightLayout::AmxTiles) return amx_tiles_bytes(n_rows, n_cols);
  int64_t rows = n_rows;
  if (layout == WeightLayout::Interleaved8) {
    rows = (n_rows + kInterleavedRows - 1) / kInterleavedRows * kInterleavedRows;
  }
  return rows * dtype_row_bytes(dtype, n_cols);
}

uint32_t q5_word_from_qh(uint32_t qh) {
  uint32_t word = 0;
  for (uint32_t c = 0; c < 4; ++c) {
    for (uint32_t i = 0; i < 4; ++i) {
      word |= ((qh >> (4 * c + i)) & 1u) << (8 * i + c);
      word |= ((qh >> (16 + 4 * c + i)) & 1u) << (8 * i + 4 + c);
    }
  }
  return word;
}

uint32_t qh_from_q5_word(uint32_t word) {
  uint32_t qh = 0;
  for (uint32_t c = 0; c < 4; ++c) {
    for (uint32_t i = 0; i < 4; ++i) {
      qh |= ((word >> (8 * i + c)) & 1u) << (4 * c + i);
      qh |= ((word >> (8 * i + 4 + c)) & 1u) << (16 + 4 * c + i);
    }
  }
  return qh;
}

namespace {

// A plain block as a sequence of fields in its own order. A header field of n bytes becomes
// field[8][n] (the 8 rows side by side); a chunked field (quants) is interleaved 4 bytes at a time
// as [c][r][4]. The 8-row block keeps the plain order of the fields. q5_word: q5_0's fifth-bit
// word, rearranged (q5_word_from_qh).
struct BlockField {
  int bytes;
  bool chunked;
  bool q5_word;
};

struct BlockFields {
  BlockField fields[7];
  int n;
};

constexpr BlockField header(int bytes) {
  return {bytes, false, false};
}
constexpr BlockField chunks(int bytes) {
  return {bytes, true, false};
}

BlockFields block_fields(DType dtype) {
  switch (dtype) {
    case DType::Q8_0:
      return {{header(2), chunks(32)}, 2};
    case DType::Q5_0:
      return {{header(2), {4, false, true}, chunks(16)}, 3};
    case DType::Q4_1:
      return {{header(2), header(2), chunks(16)}, 3};
    case DType::Q5_1:
      return {{header(2), header(2), {4, false, true}, chunks(16)}, 4};
    case DType::Q2_K:  // scales (four words), qs, d, dmin
      return {{header(4), header(4), header(4), header(4), chunks(64), header(2), header(2)}, 7};
    case DType::Q3_K:  // hmask, qs, scales (three words), d
      return {{chunks(32), chunks(64), header(4), header(4), header(4), header(2)}, 6};
    case DType::Q4_K:  // d, dmin, the three words of packed scales, qs
      return {{header(2), header(2), header(4), header(4), header(4), chunks(128)}, 6};
    case DType::Q5_K:  // as q4_k with qh (32 bytes) before qs
      return {{header(2), header(2), header(4), header(4), header(4), chunks(32), chunks(128)}, 7};
    case DType::Q6_K:  // ql, qh, the 16 int8 scales as four words, d
      return {{chunks(128), chunks(64), header(4), header(4), header(4), header(4), header(2)}, 7};
    case DType::IQ4_XS:  // d, scales_h, scales_l, qs
      return {{header(2), header(2), header(4), chunks(128)}, 4};
    default:  // q4_0, iq4_nl
      return {{header(2), chunks(16)}, 2};
  }
}

// Moves row r's block between its plain bytes and the 8-row block: kToX8 copies `from` (plain)
// into `to` (8-row block), else `from` (8-row block) into `to` (plain).
template <bool kToX8>
void move_block(DType dtype, const uint8_t* from, uint8_t* to, int r) {
  const BlockFields f = block_fields(dtype);
  // Copies n bytes between plain offset p and 8-row offset x in the chosen direction.
  auto copy = [&](int p, int x, int n) {
    if constexpr (kToX8) {
      std::memcpy(to + x, from + p, static_cast<size_t>(n));
    } else {
      std::memcpy(to + p, from + x, static_cast<size_t>(n));
    }
  };
  int at_plain = 0, at_x8 = 0;
  for (int i = 0; i < f.n; ++i) {
    const BlockField& field = f.fields[i];
    if (field.chunked) {
      for (int c = 0; c < field.bytes / 4; ++c) {
        copy(at_plain + 4 * c, at_x8 + (c * kInterleavedRows + r) * 4, 4);
      }
    } else {
      copy(at_plain, at_x8 + r * field.bytes, field.bytes);
    }
    if (field.q5_word) {  // rearrange the copied word in place
      uint8_t* word = to + (kToX8 ? at_x8 + r * field.bytes : at_plain);
      uint32_t v;
      std::memcpy(&v, word, 4);
      v = kToX8 ? q5_word_from_qh(v) : qh_from_q5_word(v);
      std::memcpy(word, &v, 4);
    }
    at_plain += field.bytes;
    at_x8 += kInterleavedRows * field.bytes;
  }
}

}  // namespace

WeightMatrix interleave_rows(const WeightMatrix& src, void* dst) {
  if (src.layout != WeightLayout::Rows || !has_interleaved_layout(src.dtype)) {
    throw Error(
        "interleave_rows: want a q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl/q2_k..q6_k/iq4_xs matrix in "
        "the "
        "Rows layout");
  }
  const int64_t rb = src.row_bytes, nb = src.n_cols / dtype_block_elems(src.dtype);
  const int64_t group_bytes = kInterleavedRows * rb;
  const int64_t plain_bytes = dtype_block_bytes(src.dtype);
  const int64_t x8_bytes = interleaved_block_bytes(src.dtype);
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
        move_block<true>(src.dtype, rows.data() + r * rb + b * plain_bytes, group + b * x8_bytes,
                         r);
      }
    }
  }
  WeightMatrix view = src;
  view.data = dst;
  view.layout = WeightLayout::Interleaved8;
  return view;
}

namespace {

// Block b of `row` in either layout as the plain block's bytes.
void plain_block(const WeightMatrix& w, int64_t row, int64_t b, uint8_t* out) {
  const int64_t plain_bytes = dtype_block_bytes(w.dtype);
  if (w.layout == WeightLayout::Rows) {
    std::memcpy(out, static_cast<const uint8_t*>(w.data) + row * w.row_bytes + b * plain_bytes,
                static_cast<size_t>(plain_bytes));
    return;
  }
  move_block<false>(w.dtype, interleaved_group(w, row) + b * interleaved_block_bytes(w.dtype), out,
                    static_cast<int>(row % kInterleavedRows));
}

template <typename Block>
Block row_block(const WeightMatrix& w, int64_t row, int64_t b) {
  Block out;
  plain_block(w, row, b, reinterpret_cast<uint8_t*>(&out));
  return out;
}

}  // namespace

BlockQ4_0 q4_0_block(const WeightMatrix& w, int64_t row, int64_t b) {
  return row_block<BlockQ4_0>(w, row, b);
}

BlockQ8_0 q8_0_block(const WeightMatrix& w, int64_t row, int64_t b) {
  return row_block<BlockQ8_0>(w, row, b);
}

BlockQ5_0 q5_0_block(const WeightMatrix& w, int64_t row, int64_t b) {
  return row_block<BlockQ5_0>(w, row, b);
}

BlockIQ4_NL iq4_nl_block(const WeightMatrix& w, int64_t row, int64_t b) {
  return row_block<BlockIQ4_NL>(w, row, b);
}

void rows_layout_row(const WeightMatrix& w, int64_t row, uint8_t* out) {
  if (w.layout == WeightLayout::Rows) {
    std::memcpy(out, static_cast<const uint8_t*>(w.data) + row * w.row_bytes,
                static_cast<size_t>(w.row_bytes));
    return;
  }
  if (w.layout == WeightLayout::AmxTiles) return amx_tiles_row(w, row, out);
  const int64_t plain_bytes = dtype_block_bytes(w.dtype);
  for (int64_t b = 0; b < w.n_cols / dtype_block_elems(w.dtype); ++b)
    plain_block(w, row, b, out + b * plain_bytes);
}

}  // namespace ember::cpu
