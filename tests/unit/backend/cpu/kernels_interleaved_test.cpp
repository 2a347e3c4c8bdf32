// The Interleaved8 layout of q8_0/q4_0/q4_1/q5_0/q5_1/iq4_nl/q4_k/q5_k/q6_k/iq4_xs matrices
// (weight_layout.h) and the matmuls on it: the layout round-trips every block, every kernel that
// reads it agrees with the plain Rows layout (bit for bit where the arithmetic is the same, within
// the reference tolerance where the decode kernel sums differently), and the determinism contract
// of kernels.h holds for it too.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "ember/backend/cpu/kernels.h"
#include "ember/backend/cpu/weight_layout.h"
#include "ember/backend/reference/reference_kernels.h"
#include "ember/core/half.h"
#include "unit/backend/cpu/kernels_test_util.h"

namespace ember::cpu {
namespace {

using test::IsaScope;
using test::make_weights;
using test::random_floats;
using test::supported_isas;

constexpr DType kQuantized[] = {DType::Q8_0, DType::Q4_0,   DType::Q4_1, DType::Q5_0,
                                DType::Q5_1, DType::IQ4_NL, DType::Q4_K, DType::Q5_K,
                                DType::Q6_K, DType::IQ4_XS, DType::Q2_K, DType::Q3_K};

bool is_super_block(DType dtype) {
  return dtype_block_elems(dtype) == 256;
}

// Row lengths for a dtype: `small` values scaled to its block (q4_k: super-blocks of 256).
std::vector<int64_t> row_lengths(DType dtype, std::initializer_list<int64_t> small) {
  std::vector<int64_t> out;
  for (int64_t k : small) out.push_back(k / 32 * dtype_block_elems(dtype));
  return out;
}
constexpr WeightLayout kInterleaved = WeightLayout::Interleaved8;

bool same_bits(float a, float b) {
  return std::memcmp(&a, &b, sizeof(float)) == 0;
}

std::string trace(Isa isa, DType dtype, int64_t K, int64_t T) {
  return std::string(isa_name(isa)) + " " + dtype_name(dtype) + " K=" + std::to_string(K) +
         " T=" + std::to_string(T);
}

TEST(KernelsInterleaved, EveryBlockRoundTripsAndPaddingIsZero) {
  for (DType dtype : kQuantized) {
    for (int64_t N : {1, 7, 8, 13, 37}) {
      for (int64_t K : row_lengths(dtype, {32, 96})) {
        SCOPED_TRACE(std::string(dtype_name(dtype)) + " N=" + std::to_string(N) +
                     " K=" + std::to_string(K));
        auto values = random_floats(N * K, 3 + static_cast<uint32_t>(N));
        auto rows = make_weights(values, N, K, dtype);
        auto il = make_weights(values, N, K, dtype, kInterleaved);
        ASSERT_EQ(il.view.layout, kInterleaved);
        ASSERT_EQ(static_cast<int64_t>(il.bytes.size()), (N + 7) / 8 * 8 * rows.view.row_bytes);
        // Out of place gives the same bytes as the in-place rewrite.
        std::vector<uint8_t> copy(il.bytes.size(), 0xAB);
        interleave_rows(rows.view, copy.data());
        EXPECT_EQ(copy, il.bytes);
        const int64_t padded = (N + 7) / 8 * 8;
        const int64_t rb = rows.view.row_bytes, block_bytes = dtype_block_bytes(dtype);
        std::vector<uint8_t> got(static_cast<size_t>(rb)), want(got.size());
        for (int64_t r = 0; r < padded; ++r) {
          rows_layout_row(il.view, r, got.data());
          std::fill(want.begin(), want.end(), 0);
          if (r < N) rows_layout_row(rows.view, r, want.data());
          ASSERT_EQ(got, want) << "row " << r;
          for (int64_t b = 0; b < K / dtype_block_elems(dtype); ++b) {  // typed accessors agree
            const uint8_t* w = want.data() + b * block_bytes;
            if (dtype == DType::Q8_0) {
              const BlockQ8_0 blk = q8_0_block(il.view, r, b);
              ASSERT_EQ(std::memcmp(&blk, w, sizeof blk), 0) << "row " << r << " block " << b;
            } else if (dtype == DType::Q4_0) {
              const BlockQ4_0 blk = q4_0_block(il.view, r, b);
              ASSERT_EQ(std::memcmp(&blk, w, sizeof blk), 0) << "row " << r << " block " << b;
            } else if (dtype == DType::Q5_0) {
              const BlockQ5_0 blk = q5_0_block(il.view, r, b);
              ASSERT_EQ(std::memcmp(&blk, w, sizeof blk), 0) << "row " << r << " block " << b;
            } else if (dtype == DType::IQ4_NL) {
              const BlockIQ4_NL blk = iq4_nl_block(il.view, r, b);
              ASSERT_EQ(std::memcmp(&blk, w, sizeof blk), 0) << "row " << r << " block " << b;
            }
          }
        }
        // dequantize_row (embedding lookups) of every ISA reads both layouts to the same bits.
        for (Isa isa : supported_isas()) {
          IsaScope scope(isa);
          std::vector<float> a(static_cast<size_t>(K)), b(a.size());
          for (int64_t r = 0; r < N; ++r) {
            dequantize_row(rows.view, r, a.data());
            dequantize_row(il.view, r, b.data());
            for (int64_t k = 0; k < K; ++k) ASSERT_TRUE(same_bits(a[k], b[k])) << r << " " << k;
          }
        }
      }
    }
  }
}

// The rearranged q5_0 fifth-bit word: a bijection, and chunk c's shifts put the fifth bit of
// value 4c + i (low) / 16 + 4c + i (high) at bit 4 of byte i.
TEST(KernelsInterleaved, Q5WordPutsEveryFifthBitWhereTheKernelShiftsIt) {
  for (int j = 0; j < 32; ++j) {
    const uint32_t qh = 1u << j;
    const uint32_t word = q5_word_from_qh(qh);
    EXPECT_EQ(qh_from_q5_word(word), qh);
    const int c = (j % 16) / 4, i = j % 4;
    const uint32_t at4 = j < 16 ? word << (4 - c) : word >> c;
    EXPECT_EQ(at4 & 0x10101010u, 0x10u << (8 * i)) << "value " << j;
  }
  for (uint32_t qh : {0u, 0xffffffffu, 0x12345678u, 0x80000001u}) {
    EXPECT_EQ(qh_from_q5_word(q5_word_from_qh(qh)), qh);
  }
}

// Against the double-precision reference, which takes 8-bit activations where the kernels do
// (interleaved: every T; see uses_8bit_activations), within 1e-5 * sum |x w| as in
// kernels_matmul_test.cpp. Below kGemmMinTokens the Rows layout takes the same 8-bit activations,
// and scalar code reads both layouts through one block accessor: there the two give the same bits.
// From kGemmMinTokens on the Rows layout runs the f32 GEMM instead: the two differ by the 8-bit
// activation error only.
TEST(KernelsInterleaved, MatchesReferenceAndRowsLayout) {
  const int64_t N = 37;  // a padded last group
  for (Isa isa : supported_isas()) {
    // The AMX set runs the AVX-512 kernels below 16 tokens and its tiles from 16 on
    // (kernels_amx_test.cpp): nothing here it would add.
    if (isa == Isa::Amx) continue;
    IsaScope scope(isa);
    for (DType dtype : kQuantized) {
      for (int64_t K : is_super_block(dtype) ? std::vector<int64_t>{256, 512, 1536}
                                             : std::vector<int64_t>{32, 64, 576, 1536}) {
        auto values = random_floats(N * K, 100 + static_cast<uint32_t>(K));
        auto rows = make_weights(values, N, K, dtype);
        auto il = make_weights(values, N, K, dtype, kInterleaved);
        std::vector<float> deq(static_cast<size_t>(K));
        for (int64_t T : {1, 2, 3, 4, 5, 9, 15, 16, 17, 29}) {
          SCOPED_TRACE(trace(isa, dtype, K, T));
          auto x = random_floats(T * K, 7 + static_cast<uint32_t>(T));
          const int64_t ldy = N + 3;
          std::vector<float> y(static_cast<size_t>(T * ldy), -123.0f), y_rows(y.size(), -123.0f);
          std::vector<float> ref_y(static_cast<size_t>(T * N));
          matmul(x.data(), T, il.view, y.data(), ldy, 0, N);
          matmul(x.data(), T, rows.view, y_rows.data(), ldy, 0, N);
          reference::matmul(x.data(), T, il.view, ref_y.data(), N, 0, N);
          ASSERT_TRUE(uses_8bit_activations(il.view, T));
          const bool same_arithmetic = isa == Isa::Scalar && T < kGemmMinTokens;
          for (int64_t n = 0; n < N; ++n) {
            reference::dequantize_row(rows.view, n, deq.data());
            for (int64_t t = 0; t < T; ++t) {
              double magnitude = 0.0;
              for (int64_t k = 0; k < K; ++k) magnitude += std::fabs(double{x[t * K + k]} * deq[k]);
              const float got = y[t * ldy + n];
              ASSERT_NEAR(got, ref_y[t * N + n], 1e-5 * magnitude + 1e-30) << t << " " << n;
              if (same_arithmetic) {
                ASSERT_TRUE(same_bits(got, y_rows[t * ldy + n])) << t << " " << n;
              } else {  // 8-bit activations move each x_k by at most 1/254 of its block's max
                ASSERT_NEAR(got, y_rows[t * ldy + n], 1e-2 * magnitude + 1e-30) << t << " " << n;
              }
            }
            for (int64_t t = 0; t < T; ++t) {
              for (int64_t c = N; c < ldy; ++c) ASSERT_EQ(y[t * ldy + c], -123.0f);
            }
          }
        }
      }
    }
  }
}

// Row ranges that cut groups, concurrent threads, and every T (prefill sizes included): the bits
// of one whole call on one token.
TEST(KernelsInterleaved, RowSplitsThreadsAndTokenCountsGiveTheSameBits) {
  const int64_t N = 53, T_max = 41;
  for (Isa isa : supported_isas()) {
    IsaScope scope(isa);
    for (DType dtype : kQuantized) {
      SCOPED_TRACE(std::string(isa_name(isa)) + " " + dtype_name(dtype));
      const int64_t K = 3 * dtype_block_elems(dtype);
      auto w = make_weights(random_floats(N * K, 5), N, K, dtype, kInterleaved);
      auto x = random_floats(T_max * K, 6);
      std::vector<float> single(static_cast<size_t>(T_max * N));
      for (int64_t t = 0; t < T_max; ++t) {
        matmul(x.data() + t * K, 1, w.view, single.data() + t * N, N, 0, N);
      }
      for (int64_t T : {2, 3, 4, 5, 6, 7, 8, 9, 15, 16, 17, 41}) {
        if (matmul_runs_on_tiles(w.view, T)) continue;  // bf16 tiles: kernels_amx_test.cpp
        std::vector<float> whole(static_cast<size_t>(T * N)), split(whole.size());
        matmul(x.data(), T, w.view, whole.data(), N, 0, N);
        const int64_t cuts[] = {0, 1, 4, 5, 13, 14, 30, 39, 40, 52, 53};
        for (size_t i = std::size(cuts) - 1; i > 0; --i) {
          matmul(x.data(), T, w.view, split.data(), N, cuts[i - 1], cuts[i]);
        }
        for (int64_t i = 0; i < T * N; ++i) {
          ASSERT_TRUE(same_bits(whole[i], single[i])) << "T=" << T << " i=" << i;
          ASSERT_TRUE(same_bits(split[i], single[i])) << "T=" << T << " i=" << i;
        }
      }
      std::vector<float> parts(static_cast<size_t>(4 * N));
      std::vector<std::thread> threads;
      for (int64_t i = 0; i < 4; ++i) {
        threads.emplace_back(
            [&, i] { matmul(x.data(), 4, w.view, parts.data(), N, N * i / 4, N * (i + 1) / 4); });
      }
      for (auto& th : threads) th.join();
      for (int64_t i = 0; i < 4 * N; ++i) ASSERT_TRUE(same_bits(parts[i], single[i])) << i;
    }
  }
}

// Fills a plain block of `dtype` with scale d (and min d) and its quants at an extreme: pattern 0
// every value at the largest level (q4_0 +7, q8_0 +127, q5_0 +15, iq4_nl +113, q4_1 15, q5_1 31,
// q4_k 15 / q5_k 31 with every 6-bit scale and min at 63, q6_k 31 with scales 127), 1 at the
// smallest (-8, -128, -16, -127, 0, 0; q4_k / q5_k 0 with scales 63, mins 0; q6_k -32 with scales
// -128), 2 mixing the two (q4_k / q5_k: scales 63, mins 0..63; q6_k: scales alternating).
void fill_extreme_block(DType dtype, uint8_t* blk, uint16_t d, int pattern) {
  const uint8_t hi_nibble = pattern == 1 ? 0x00 : 0xff, lo_nibble = pattern == 0 ? 0xff : 0x00;
  const uint8_t nibbles = static_cast<uint8_t>((hi_nibble & 0xf0) | (lo_nibble & 0x0f));
  std::memcpy(blk, &d, 2);
  switch (dtype) {
    case DType::Q8_0:
      for (int i = 0; i < 32; ++i) {
        const bool top = pattern == 0 || (pattern == 2 && i % 2 == 0);
        blk[2 + i] = static_cast<uint8_t>(top ? 127 : -128);
      }
      break;
    case DType::Q5_0:
    case DType::Q5_1: {
      const int at = dtype == DType::Q5_1 ? 4 : 2;  // q5_1: the min after d
      std::memcpy(blk + 2, &d, at - 2);
      const uint32_t qh = pattern == 0 ? 0xffffffffu : pattern == 1 ? 0u : 0xffff0000u;
      std::memcpy(blk + at, &qh, 4);  // pattern 2: values 16..31 at the top, 0..15 at the bottom
      std::memset(blk + at + 4, nibbles, 16);
      break;
    }
    case DType::Q4_1:
      std::memcpy(blk + 2, &d, 2);
      std::memset(blk + 4, nibbles, 16);
      break;
    case DType::Q6_K: {  // q = 31 / -32 (mixed: by half), scales 127 / -128 / alternating
      std::memset(blk, pattern == 1 ? 0x00 : 0xff, 128);       // ql
      std::memset(blk + 128, pattern == 1 ? 0x00 : 0xff, 64);  // qh
      if (pattern == 2) std::memset(blk, 0x0f, 128);           // high nibbles 0: values 64.. low
      for (int j = 0; j < 16; ++j) {
        blk[192 + j] = static_cast<uint8_t>(pattern == 0   ? 127
                                            : pattern == 1 ? -128
                                                           : (j % 2 ? 127 : -128));
      }
      std::memcpy(blk + 208, &d, 2);
      break;
    }
    case DType::Q2_K: {  // q 3 / 0 / mixed; scale 15 with min 15 / 0 / alternating
      std::memset(blk, pattern == 0 ? 0xff : 0x0f, 16);
      if (pattern == 2) {
        for (int i = 0; i < 16; i += 2) blk[i] = 0xff;
      }
      std::memset(blk + 16, pattern == 0 ? 0xff : pattern == 1 ? 0x00 : 0x33, 64);
      std::memcpy(blk + 80, &d, 2);
      std::memcpy(blk + 82, &d, 2);
      break;
    }
    case DType::Q3_K: {  // q 3 / -4 / mixed; scales +31 / -32 / mixed
      std::memset(blk, pattern == 0 ? 0xff : pattern == 1 ? 0x00 : 0x0f, 32);       // hmask
      std::memset(blk + 32, pattern == 0 ? 0xff : pattern == 1 ? 0x00 : 0xcc, 64);  // qs
      std::memset(blk + 96, pattern == 0 ? 0xff : pattern == 1 ? 0x00 : 0xf0, 12);  // scales
      std::memcpy(blk + 108, &d, 2);
      break;
    }
    case DType::IQ4_XS: {  // levels +113 / -127 / mixed; scales 63 - 32 / 0 - 32 / alternating
      const uint16_t high = pattern == 0 ? 0xffff : pattern == 1 ? 0x0000 : 0x5555;
      std::memcpy(blk + 2, &high, 2);
      std::memset(blk + 4, pattern == 0 ? 0xff : pattern == 1 ? 0x00 : 0x0f, 4);
      std::memset(blk + 8, nibbles, 128);
      break;
    }
    case DType::Q4_K:
    case DType::Q5_K: {
      std::memcpy(blk + 2, &d, 2);  // dmin = d
      uint8_t* scales = blk + 4;    // k_scale_min packing: 6-bit scale j, min j
      for (int j = 0; j < 8; ++j) {
        const uint8_t sc = 63, m = pattern == 0   ? 63
                                   : pattern == 1 ? 0
                                                  : static_cast<uint8_t>(9 * j);
        if (j < 4) {
          scales[j] = static_cast<uint8_t>((scales[j] & 0xc0) | sc);
          scales[j + 4] = static_cast<uint8_t>((scales[j + 4] & 0xc0) | m);
        } else {
          scales[j + 4] = static_cast<uint8_t>((sc & 0x0f) | ((m & 0x0f) << 4));
          scales[j - 4] = static_cast<uint8_t>((scales[j - 4] & 0x3f) | ((sc >> 4) << 6));
          scales[j] = static_cast<uint8_t>((scales[j] & 0x3f) | ((m >> 4) << 6));
        }
      }
      if (dtype == DType::Q5_K) {  // fifth bits: all set, none, or sub-blocks 4-7 only
        std::memset(blk + 16, pattern == 0 ? 0xff : pattern == 1 ? 0x00 : 0xf0, 32);
      }
      std::memset(blk + (dtype == DType::Q5_K ? 48 : 16), nibbles, 128);
      break;
    }
    default:  // q4_0, iq4_nl
      std::memset(blk + 2, nibbles, 16);
      break;
  }
}

// The extremes of the integer arithmetic: q4_0 sums a block's 8 pair products in int16 (at most
// 8 * 2 * 15 * 127 = 30480; q4_1 alike), q5_0 / q5_1 4 of them (4 * 2 * 31 * 127 = 31496), q8_0
// takes -128 and iq4_nl -127 through the sign trick. Every weight and activation at its extreme
// (and zero scales) must still give the exact block dots, at decode and prefill T, in a padded last
// group.
TEST(KernelsInterleaved, ExtremeQuantsAndZeroScalesGiveExactDots) {
  const int64_t N = 13;
  const uint16_t one = f32_to_f16(1.0f), zero = f32_to_f16(0.0f);
  for (DType dtype : kQuantized) {
    const int64_t K = 2 * dtype_block_elems(dtype);
    const int64_t rb = dtype_row_bytes(dtype, K), block_bytes = dtype_block_bytes(dtype);
    std::vector<uint8_t> bytes(static_cast<size_t>(N * rb));
    for (int64_t r = 0; r < N; ++r) {
      for (int64_t b = 0; b < K / dtype_block_elems(dtype); ++b) {
        fill_extreme_block(dtype, bytes.data() + r * rb + b * block_bytes, r % 5 == 4 ? zero : one,
                           static_cast<int>((r + b) % 3));
      }
    }
    WeightMatrix rows{dtype, bytes.data(), N, K, rb};
    std::vector<uint8_t> il_bytes(
        static_cast<size_t>(weight_matrix_bytes(dtype, N, K, kInterleaved)));
    WeightMatrix il = interleave_rows(rows, il_bytes.data());
    for (int64_t T : {1, 3, 17}) {
      std::vector<float> x(static_cast<size_t>(T * K));  // +-1: quantizes to +-127, d = 1/127
      for (int64_t i = 0; i < T * K; ++i)
        x[i] = (i / K) % 3 == 2 ? (i % 2 ? 1.0f : -1.0f) : (i / K) % 3 == 1 ? -1.0f : 1.0f;
      std::vector<float> want(static_cast<size_t>(T * N));
      reference::matmul(x.data(), T, il, want.data(), N, 0, N);
      for (Isa isa : supported_isas()) {
        IsaScope scope(isa);
        std::vector<float> y(static_cast<size_t>(T * N));
        matmul(x.data(), T, il, y.data(), N, 0, N);
        for (int64_t i = 0; i < T * N; ++i) {
          if (i % N % 5 == 4) {
            ASSERT_EQ(want[i], 0.0f);
          }
          // Block dots are exact integers up to 32 * 128 * 127 (q4_k: 256 * 63 * 15 * 127, with
          // the mins' part as large): only the f32 accumulation rounds.
          const double bound = dtype == DType::Q6_K     ? 2.0 * 256 * 128 * 32
                               : dtype == DType::IQ4_XS ? 2.0 * 256 * 127 * 32
                               : dtype == DType::Q3_K   ? 2.0 * 256 * 128 * 32
                               : dtype == DType::Q2_K   ? 2.0 * 256 * 128 * 15 * 4
                               : is_super_block(dtype)  ? 2.0 * 2 * 256 * 63 * 31
                                                        : 2.0 * 32 * 128;
          EXPECT_NEAR(y[i], want[i], 1e-5 * bound)
              << isa_name(isa) << " " << dtype_name(dtype) << " T=" << T << " i " << i;
        }
      }
    }
  }
}

TEST(KernelsInterleaved, RejectsFloatAndAlreadyInterleavedMatrices) {
  auto f = make_weights(random_floats(8 * 32, 1), 8, 32, DType::BF16);
  std::vector<uint8_t> out(f.bytes.size());
  EXPECT_ANY_THROW(interleave_rows(f.view, out.data()));
  auto q = make_weights(random_floats(8 * 32, 1), 8, 32, DType::Q8_0, kInterleaved);
  std::vector<uint8_t> out2(q.bytes.size());
  EXPECT_ANY_THROW(interleave_rows(q.view, out2.data()));
}

}  // namespace
}  // namespace ember::cpu
