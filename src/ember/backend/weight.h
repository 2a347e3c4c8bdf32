// A weight matrix as a backend holds it: the one weight type model code passes to the backend's
// matmul. The backend made it (Backend::upload_matrix) and decides its layout and memory; model
// code reads only its shape and dtype.
#pragma once

#include <cstdint>

#include "ember/core/dtype.h"

namespace ember {

// How a matrix's rows sit in memory.
enum class WeightLayout : uint8_t {
  Rows,              // row-major, each row row_bytes apart (every file format's layout)
  Interleaved8,      // cpu backend, q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl/q2_k..q6_k/iq4_xs only: groups
                     // of 8 rows with their blocks interleaved, the last group zero-padded
                     // (backend/cpu/weight_layout.h)
  QuantsThenScales,  // cuda backend, q8_0/q4_0 only: every row's quants (K bytes for q8_0, K / 2
                     // for q4_0, 16-byte aligned, nibbles ordered as in the file's blocks) and
                     // then every row's f16 block scales [n_rows, K / 32]; the same bytes() total
  AmxTiles,          // cpu backend with the AMX kernel set, bf16 only: rows in blocks of 16 (the
                     // last zero-padded), each block's columns in chunks of 32 (the last
                     // zero-padded), each (block, chunk) one 1 KiB tile [16 column pairs][16 rows]
                     // [2] as TDPBF16PS reads its B operand (backend/cpu/amx_weight_tiles.h)
};

// W [n_rows, n_cols] in `dtype`; row_bytes = dtype_row_bytes(dtype, n_cols) is one row's size (in
// the Rows layout also the distance between rows). `data` is in the backend's memory (host memory
// for cpu and reference, device memory for a GPU backend).
struct WeightMatrix {
  DType dtype = DType::F32;
  const void* data = nullptr;
  int64_t n_rows = 0;  // output features N
  int64_t n_cols = 0;  // input features K
  int64_t row_bytes = 0;
  WeightLayout layout = WeightLayout::Rows;

  int64_t bytes() const { return n_rows * row_bytes; }
};

}  // namespace ember
