// Internal to the block quantizers: the row quantizer of every block type beyond q8_0/q4_0
// (quantize_legacy.cpp, quantize_kquants.cpp, quantize_iq4.cpp, dispatched by quantize_row_blocks
// in quantize_blocks.cpp) and the scale searches they share (quantize_blocks.cpp).
//
// What is minimised: the plain squared error sum_i (x_i - dequantized x_i)^2 of a block, every
// element weighted alike. There is no importance matrix, and no magnitude weighting either: a
// weight of x^2 favours the large values at the expense of the many small ones, which is a guess
// about what matters to the model; unweighted error is the one thing measurable without data, and
// the one the tests hold the quantizers to.
//
// How: every block type is "value = scale * level" (symmetric: q5_0, q3_k, q6_k, iq4_nl, iq4_xs)
// or "value = scale * q + offset" (affine: q4_1, q5_1, q2_k, q4_k, q5_k). A search tries candidate
// scales (symmetric: the block's extreme mapped near either end of the levels; affine: its range
// spread over about nmax steps, anchored at its low end, middle or high end, so either tail or
// both may clip), snaps every value to its nearest level, refits the scale (and offset) to those
// levels by least squares, keeps the candidate of least error and polishes it by snapping and
// refitting again. Super-block types (256 values) fit each sub-block that way, then store the
// sub-block scales as small integers times one f16 super-scale: each sub-block tries its rounded
// integers' neighbours too, and the super-scale is refitted to the chosen integers.
//
// Every function is a pure function of its inputs (no state, no threads), so the same row always
// gives the same bytes; blocks are built zero-initialised, so no byte is left unset.
#pragma once

#include <cstdint>

#include "ember/core/half.h"
#include "ember/core/quant_blocks.h"

namespace ember::quant {

// f16 of v, with magnitudes past the f16 range clamped to +-65504: a stored scale is never an
// infinity, whatever the input.
uint16_t f16_finite(float v);
inline float f16_rounded(float v) {
  return f16_to_f32(f16_finite(v));
}

// The values a block's quants stand for, ascending: the integers lo..hi, or the iq4_nl grid.
class Levels {
 public:
  static Levels integers(int lo, int hi) { return Levels(hi - lo + 1, lo, false); }
  static Levels iq4nl() { return Levels(16, 0, true); }

  int count() const { return count_; }
  float value(int i) const { return static_cast<float>(iq4nl_ ? kIq4nlValues[i] : lo_ + i); }
  float lowest() const { return value(0); }
  float highest() const { return value(count_ - 1); }
  // Index of the level nearest t.
  int nearest(float t) const;

 private:
  Levels(int count, int lo, bool iq4nl) : count_(count), lo_(lo), iq4nl_(iq4nl) {}
  int count_;
  int lo_;      // integers: value(i) = lo + i
  bool iq4nl_;  // value(i) = kIq4nlValues[i]
};

// The searches below work on one block or sub-block: n a multiple of 4, at most 32.

// x[0..n) ~ scale * levels.value(idx[i]).
struct ScaleFit {
  float scale = 0;
  double error = 0;
};
// The scale (either sign) of least squared error found by the search; error assumes the exact
// float scale.
ScaleFit fit_scale(const float* x, int n, const Levels& levels);
// Snaps every x / scale to its nearest level (the level nearest 0 when scale is 0) into idx and
// returns the squared error of scale * level, computed as the dequantizer does.
double snap_to_scale(const float* x, int n, float scale, const Levels& levels, uint8_t* idx);

// x[0..n) ~ scale * q[i] + offset, q in 0..nmax, scale >= 0.
struct AffineFit {
  float scale = 0, offset = 0;
  double error = 0;
};
// The (scale, offset) of least squared error found by the search; `nonpositive_offset` holds the
// offset <= 0 (the K-quants store it as -dmin * min with min >= 0).
AffineFit fit_affine(const float* x, int n, int nmax, bool nonpositive_offset);
// q[i] = the nearest of 0..nmax to (x - offset) / scale (0 when scale is 0); returns the squared
// error of scale * q + offset.
double snap_affine(const float* x, int n, float scale, float offset, int nmax, uint8_t* q);

// One super-block of 256 values in sub-blocks of `sub` (16 or 32) with integer sub-block scales:
// value = d * scales[j] * levels.value(idx[e]), scales[j] in [smin, smax], d representable in f16.
struct SymmetricSuper {
  float d = 0;
  int scales[16] = {};
  uint8_t idx[kSuperBlock] = {};
  double error = 0;
};
SymmetricSuper quantize_symmetric_super(const float* x, int sub, const Levels& levels, int smin,
                                        int smax);

// One super-block with an affine code per sub-block: value = d * scales[j] * q[e] - dmin * mins[j],
// q in 0..nmax, scales and mins in 0..imax, d and dmin >= 0 and representable in f16.
struct AffineSuper {
  float d = 0, dmin = 0;
  int scales[16] = {}, mins[16] = {};
  uint8_t q[kSuperBlock] = {};
  double error = 0;
};
AffineSuper quantize_affine_super(const float* x, int sub, int nmax, int imax);

// The row quantizers: n values (a multiple of the type's block) -> n / block blocks at `out`
// (unaligned is fine).
void quantize_row_q4_1(const float* x, void* out, int64_t n);
void quantize_row_q5_0(const float* x, void* out, int64_t n);
void quantize_row_q5_1(const float* x, void* out, int64_t n);
void quantize_row_q8_1(const float* x, void* out, int64_t n);
void quantize_row_q2_k(const float* x, void* out, int64_t n);
void quantize_row_q3_k(const float* x, void* out, int64_t n);
void quantize_row_q4_k(const float* x, void* out, int64_t n);
void quantize_row_q5_k(const float* x, void* out, int64_t n);
void quantize_row_q6_k(const float* x, void* out, int64_t n);
void quantize_row_q8_k(const float* x, void* out, int64_t n);
void quantize_row_iq4_nl(const float* x, void* out, int64_t n);
void quantize_row_iq4_xs(const float* x, void* out, int64_t n);

}  // namespace ember::quant
