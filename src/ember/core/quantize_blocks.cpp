// quantize_row_blocks (the types beyond q8_0/q4_0, by family) and the scale searches every block
// quantizer shares; see quantize_blocks.h for what they minimise and how.
#include "ember/core/quantize_blocks.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>

#include "ember/core/error.h"
#include "ember/core/quantize.h"

namespace ember {
namespace quant {
namespace {

// Candidate scales of a search: the block's extreme value mapped to (1 + kStep * k) times an end
// of the levels, k in [-kSteps, kSteps]. +-25% spans the optimum of every block type here (it is
// smaller than "extreme -> end" for bell-shaped blocks, where clipping the tails pays); the least
// squares refit of each candidate then moves it off this grid.
constexpr int kSteps = 4;
constexpr float kStep = 0.06f;
// Rounds of snap-and-refit after the search; each can only lower the error, and it settles fast.
constexpr int kPolishRounds = 4;

constexpr float kF16Max = 65504.0f;
// Ranges below this are treated as zero (every f16 scale of them is 0 anyway).
constexpr float kNegligible = 1e-30f;

// round(t) (halves up) clamped to [lo, hi]; NaN goes to lo. Inside the range t - lo + 0.5 > 0,
// so truncation is floor: one cvttss2si, where lround is a libm call in this hot loop.
int round_clamped(float t, int lo, int hi) {
  const float flo = static_cast<float>(lo), fhi = static_cast<float>(hi);
  t = t > flo ? t : flo;  // branch-free (maxss / minss); NaN takes flo
  t = t < fhi ? t : fhi;
  return lo + static_cast<int>(t - flo + 0.5f);
}

double squares(const float* x, int n) {
  double s = 0;
  for (int i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
  return s;
}

// Snaps x / scale to levels and refits the scale to those levels by least squares:
// scale = sum(x v) / sum(v^2), error = sum(x^2) - sum(x v)^2 / sum(v^2).
ScaleFit refit_scale(const float* x, int n, float scale, const Levels& levels, double sxx) {
  const float inv = 1.0f / scale;
  double sxv = 0, svv = 0;
  for (int i = 0; i < n; ++i) {
    const double v = levels.value(levels.nearest(x[i] * inv));
    sxv += x[i] * v;
    svv += v * v;
  }
  if (svv == 0) return {0.0f, sxx};
  return {static_cast<float>(sxv / svv), std::max(0.0, sxx - sxv * sxv / svv)};
}

// Sums for the least-squares fit of x ~ a * q + b over a block: n, sum x and sum x^2 are the
// block's own (computed once); sum q, sum q^2 (integers, exact) and sum x q are a code's.
struct AffineSums {
  double n = 0, sx = 0, sxx = 0;
  int sq = 0, sqq = 0;
  double sxq = 0;

  AffineSums(const float* x, int count) : n(count) {
    for (int i = 0; i < count; ++i) {
      sx += x[i];
      sxx += static_cast<double>(x[i]) * x[i];
    }
  }
  void add(float x, int q) {
    sq += q;
    sqq += q * q;
    sxq += static_cast<double>(x) * q;
  }
};

// The least-squares (scale, offset) for fixed q, with scale >= 0 and, if asked, offset <= 0 (the
// constrained optimum then lies on that edge: offset 0, scale refitted alone).
AffineFit solve_affine(const AffineSums& s, bool nonpositive_offset) {
  const double sq = s.sq, sqq = s.sqq;
  const double det = s.n * sqq - sq * sq;
  double a = 0, b = s.sx / s.n;
  if (det > 0) {
    a = (s.n * s.sxq - sq * s.sx) / det;
    b = (sqq * s.sx - sq * s.sxq) / det;
  }
  if (a < 0) {  // all q equal, or a degenerate fit: the mean alone
    a = 0;
    b = s.sx / s.n;
  }
  if (nonpositive_offset && b > 0) {
    b = 0;
    a = sqq > 0 ? std::max(0.0, s.sxq / sqq) : 0;
  }
  const double err =
      s.sxx - 2 * a * s.sxq - 2 * b * s.sx + a * a * sqq + 2 * a * b * sq + s.n * b * b;
  return {static_cast<float>(a), static_cast<float>(b), std::max(0.0, err)};
}

// Snaps with (scale, offset) and refits both; `block` holds the block's own sums.
AffineFit refit_affine(const float* x, const AffineSums& block, const AffineFit& at, int nmax,
                       bool nonpositive) {
  const float inv = at.scale > 0 ? 1.0f / at.scale : 0.0f;
  AffineSums s = block;
  for (int i = 0; i < static_cast<int>(block.n); ++i) {
    s.add(x[i], round_clamped((x[i] - at.offset) * inv, 0, nmax));
  }
  return solve_affine(s, nonpositive);
}

}  // namespace

uint16_t f16_finite(float v) {
  return f32_to_f16(std::clamp(v, -kF16Max, kF16Max));
}

namespace {

// The nearest iq4_nl level of t, tabulated on half-unit cells: the levels are integers, so their
// midpoints are multiples of 0.5 and the nearest level is the same across each cell
// [c / 2, (c + 1) / 2) (a tie, t exactly on a midpoint, goes up); the cell is floor(2 t) =
// round(2 t - 0.5), clamped to the table, which spans t in [-128, 114).
constexpr int kGridLo = -128, kGridCells = 2 * (114 - kGridLo);
constexpr std::array<uint8_t, kGridCells> make_grid_table() {
  std::array<uint8_t, kGridCells> table{};
  for (int c = 0; c < kGridCells; ++c) {
    const int twice_t = 2 * kGridLo + c;  // 2 t at the cell's lower end
    int k = 0;
    while (k < 15 && twice_t >= kIq4nlValues[k] + kIq4nlValues[k + 1]) ++k;
    table[static_cast<size_t>(c)] = static_cast<uint8_t>(k);
  }
  return table;
}
constexpr std::array<uint8_t, kGridCells> kGridNearest = make_grid_table();

}  // namespace

int Levels::nearest(float t) const {
  if (!iq4nl_) return round_clamped(t, lo_, lo_ + count_ - 1) - lo_;
  const int cell = round_clamped(2.0f * t - 0.5f, 2 * kGridLo, 2 * kGridLo + kGridCells - 1);
  return kGridNearest[static_cast<size_t>(cell - 2 * kGridLo)];
}

double snap_to_scale(const float* x, int n, float scale, const Levels& levels, uint8_t* idx) {
  if (scale == 0) {
    std::fill(idx, idx + n, static_cast<uint8_t>(levels.nearest(0)));
    return squares(x, n);
  }
  const float inv = 1.0f / scale;
  double err = 0;
  for (int i = 0; i < n; ++i) {
    const int k = levels.nearest(x[i] * inv);
    idx[i] = static_cast<uint8_t>(k);
    const float e = x[i] - scale * levels.value(k);  // the dequantizer's scale * level
    err += static_cast<double>(e) * e;
  }
  return err;
}

ScaleFit fit_scale(const float* x, int n, const Levels& levels) {
  float amax = 0, extreme = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      extreme = x[i];
    }
  }
  const double sxx = squares(x, n);
  ScaleFit best{0.0f, sxx};
  // Far below f16's smallest scale (6e-8): every stored scale would be 0; 1 / scale must be finite.
  if (amax < kNegligible) return best;
  for (const float end : {levels.highest(), levels.lowest()}) {
    for (int k = -kSteps; k <= kSteps; ++k) {
      const ScaleFit c = refit_scale(x, n, extreme / (end * (1 + kStep * k)), levels, sxx);
      if (c.error < best.error) best = c;
    }
  }
  for (int round = 0; round < kPolishRounds && best.scale != 0; ++round) {
    const ScaleFit c = refit_scale(x, n, best.scale, levels, sxx);
    if (!(c.error < best.error)) break;
    best = c;
  }
  return best;
}

double snap_affine(const float* x, int n, float scale, float offset, int nmax, uint8_t* q) {
  const float inv = scale > 0 ? 1.0f / scale : 0.0f;
  double err = 0;
  for (int i = 0; i < n; ++i) {
    const int k = round_clamped((x[i] - offset) * inv, 0, nmax);
    q[i] = static_cast<uint8_t>(k);
    const double e = x[i] - (scale * static_cast<float>(k) + offset);
    err += e * e;
  }
  return err;
}

namespace {

// One candidate of the affine search: the range [lo, hi] spread over factor * nmax steps, anchored
// at its low end (q = 0 there; above factor 1 only the top clips), its middle (both tails clip) or
// its high end (q = nmax there; only the bottom clips), then the least-squares fit to those q.
struct AffineSearch {
  const float* x;
  int nmax;
  bool nonpositive_offset;
  float lo, hi;
  AffineSums block;

  AffineFit at(int anchor, float factor) const {
    const float fmax = static_cast<float>(nmax);
    const float from = anchor == 0 ? lo : anchor == 1 ? 0.5f * (lo + hi) : hi;
    const float base = 0.5f * fmax * static_cast<float>(anchor);
    const float iscale = fmax * factor / (hi - lo);
    const int n = static_cast<int>(block.n);
    int q[32];
    for (int i = 0; i < n; ++i) q[i] = round_clamped((x[i] - from) * iscale + base, 0, nmax);
    AffineSums s = block;
    for (int i = 0; i < n; ++i) s.sq += q[i], s.sqq += q[i] * q[i];
    float sxq[4] = {};
    for (int i = 0; i < n; i += 4) {
      for (int l = 0; l < 4; ++l) sxq[l] += x[i + l] * static_cast<float>(q[i + l]);
    }
    s.sxq = (static_cast<double>(sxq[0]) + sxq[1]) + (static_cast<double>(sxq[2]) + sxq[3]);
    return solve_affine(s, nonpositive_offset);
  }
};

}  // namespace

// A coarse pass over the three anchorings, a finer one about the best, then the polish. Bell-shaped
// blocks gain from clipping both tails, skewed ones from clipping one: the anchors cover both.
AffineFit fit_affine(const float* x, int n, int nmax, bool nonpositive_offset) {
  float lo = x[0], hi = x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
  }
  if (nonpositive_offset) lo = std::min(lo, 0.0f);
  const AffineSums block(x, n);
  // (Nearly) constant: the offset alone, their mean.
  if (!(hi - lo > kNegligible)) return solve_affine(block, nonpositive_offset);
  const AffineSearch search{x, nmax, nonpositive_offset, lo, hi, block};
  AffineFit best{0.0f, 0.0f, std::numeric_limits<double>::infinity()};
  int best_anchor = 1;
  float best_factor = 1;
  for (int anchor = 0; anchor < 3; ++anchor) {
    for (int k = -kSteps; k <= kSteps; ++k) {
      const AffineFit c = search.at(anchor, 1 + kStep * static_cast<float>(k));
      if (c.error < best.error) {
        best = c;
        best_anchor = anchor;
        best_factor = 1 + kStep * static_cast<float>(k);
      }
    }
  }
  for (const float k : {-0.5f, -0.25f, 0.25f, 0.5f}) {
    const AffineFit c = search.at(best_anchor, best_factor + kStep * k);
    if (c.error < best.error) best = c;
  }
  for (int round = 0; round < kPolishRounds; ++round) {
    const AffineFit c = refit_affine(x, block, best, nmax, nonpositive_offset);
    if (!(c.error < best.error)) break;
    best = c;
  }
  return best;
}

// ---- Super-blocks ----------------------------------------------------------------------------
// The sub-block fits above give float scales (and mins); the format keeps them as small integers
// times one f16 super-scale (and one for the mins). Rounding each to its nearest integer is not
// the best choice for the values (the sub-block's levels move with it), so each sub-block also
// tries the integers either side (affine: the scale's, then the min's beside the best scale) and
// keeps the one of least error for its values. The super-scale starts with the largest sub-scale
// mapped to 100% and 95% of the integer range (either end of it for the signed scales), and is
// then refitted by least squares to the chosen integers and levels, rounded to f16, and kept
// while the error falls.

namespace {

constexpr int kSuperRefits = 3;
// Fractions of the integer range the largest sub-scale is mapped to by the starting candidates.
constexpr float kSuperStarts[] = {1.0f, 0.95f};

// The super-block at super-scale d: each sub-block's integer scale (its rounded fit, or a
// neighbour) and levels, and the total error.
SymmetricSuper symmetric_at(const float* x, int sub, const Levels& levels, int smin, int smax,
                            const float* sub_scales, float d) {
  SymmetricSuper out;
  out.d = d;
  for (int j = 0; j < kSuperBlock / sub; ++j) {
    const float* xj = x + j * sub;
    const int c0 = d != 0 ? round_clamped(sub_scales[j] / d, smin, smax) : 0;
    double best = std::numeric_limits<double>::infinity();
    for (int c = std::max(smin, c0 - 1); c <= std::min(smax, c0 + 1); ++c) {
      uint8_t idx[32];
      const double e = snap_to_scale(xj, sub, d * static_cast<float>(c), levels, idx);
      if (e < best) {
        best = e;
        out.scales[j] = c;
        std::memcpy(out.idx + j * sub, idx, static_cast<size_t>(sub));
      }
    }
    out.error += best;
  }
  return out;
}

// The least-squares super-scale for fixed integers and levels: sum(x v) / sum(v^2), v = c * level.
float refit_symmetric_d(const float* x, int sub, const Levels& levels, const SymmetricSuper& s) {
  double sxv = 0, svv = 0;
  for (int e = 0; e < kSuperBlock; ++e) {
    const double v = s.scales[e / sub] * static_cast<double>(levels.value(s.idx[e]));
    sxv += x[e] * v;
    svv += v * v;
  }
  return svv > 0 ? f16_rounded(static_cast<float>(sxv / svv)) : s.d;
}

}  // namespace

SymmetricSuper quantize_symmetric_super(const float* x, int sub, const Levels& levels, int smin,
                                        int smax) {
  float sub_scales[16];
  float extreme = 0;
  for (int j = 0; j < kSuperBlock / sub; ++j) {
    sub_scales[j] = fit_scale(x + j * sub, sub, levels).scale;
    if (std::fabs(sub_scales[j]) > std::fabs(extreme)) extreme = sub_scales[j];
  }
  SymmetricSuper best;
  best.error = std::numeric_limits<double>::infinity();
  if (extreme == 0) return symmetric_at(x, sub, levels, smin, smax, sub_scales, 0.0f);
  for (const int end : {smin, smax}) {
    for (const float f : kSuperStarts) {
      const float d = f16_rounded(extreme / (static_cast<float>(end) * f));
      SymmetricSuper c = symmetric_at(x, sub, levels, smin, smax, sub_scales, d);
      if (c.error < best.error) best = c;
    }
  }
  for (int round = 0; round < kSuperRefits; ++round) {
    const float d = refit_symmetric_d(x, sub, levels, best);
    if (d == best.d) break;
    SymmetricSuper c = symmetric_at(x, sub, levels, smin, smax, sub_scales, d);
    if (!(c.error < best.error)) break;
    best = c;
  }
  return best;
}

namespace {

// The super-block at super-scales (d, dmin): each sub-block's integer scale and min (rounded fits,
// or neighbours) and q, and the total error.
AffineSuper affine_at(const float* x, int sub, int nmax, int imax, const AffineFit* fits, float d,
                      float dmin) {
  AffineSuper out;
  out.d = d;
  out.dmin = dmin;
  for (int j = 0; j < kSuperBlock / sub; ++j) {
    const float* xj = x + j * sub;
    const int c0 = d > 0 ? round_clamped(fits[j].scale / d, 0, imax) : 0;
    const int m0 = dmin > 0 ? round_clamped(-fits[j].offset / dmin, 0, imax) : 0;
    double best = std::numeric_limits<double>::infinity();
    auto attempt = [&](int c, int m) {
      if (c < 0 || c > imax || m < 0 || m > imax) return;
      uint8_t q[32];
      const float offset = -(dmin * static_cast<float>(m));
      const double e = snap_affine(xj, sub, d * static_cast<float>(c), offset, nmax, q);
      if (e < best) {
        best = e;
        out.scales[j] = c;
        out.mins[j] = m;
        std::memcpy(out.q + j * sub, q, static_cast<size_t>(sub));
      }
    };
    attempt(c0 - 1, m0);  // the scale's neighbours, then the min's beside the best scale
    attempt(c0, m0);
    attempt(c0 + 1, m0);
    const int c = out.scales[j];
    attempt(c, m0 - 1);
    attempt(c, m0 + 1);
    out.error += best;
  }
  return out;
}

// The least-squares (d, dmin) >= 0 for fixed integers: x ~ d a - dmin b, a = scale * q, b = min.
// Normal equations [saa -sab; sab -sbb] [d; dmin] = [sxa; sxb]; when that optimum has a negative
// part, the better of the two edges (dmin = 0 or d = 0), each fitted alone.
void refit_affine_d(const float* x, int sub, const AffineSuper& s, float* d, float* dmin) {
  double saa = 0, sab = 0, sbb = 0, sxa = 0, sxb = 0;
  for (int e = 0; e < kSuperBlock; ++e) {
    const double a = static_cast<double>(s.scales[e / sub]) * s.q[e], b = s.mins[e / sub];
    saa += a * a;
    sab += a * b;
    sbb += b * b;
    sxa += x[e] * a;
    sxb += x[e] * b;
  }
  const double det = sab * sab - saa * sbb;
  double dd = -1, dm = -1;
  if (det != 0) {
    dd = (sab * sxb - sxa * sbb) / det;
    dm = (saa * sxb - sab * sxa) / det;
  }
  if (!(dd >= 0 && dm >= 0)) {
    // Error change from (0, 0) of each edge: -sxa^2 / saa (dmin = 0), -sxb^2 / sbb (d = 0).
    const double d_alone = saa > 0 ? std::max(0.0, sxa / saa) : 0;
    const double dmin_alone = sbb > 0 ? std::max(0.0, -sxb / sbb) : 0;
    const bool use_d = d_alone * sxa >= dmin_alone * -sxb;
    dd = use_d ? d_alone : 0;
    dm = use_d ? 0 : dmin_alone;
  }
  *d = f16_rounded(static_cast<float>(dd));
  *dmin = f16_rounded(static_cast<float>(dm));
}

}  // namespace

AffineSuper quantize_affine_super(const float* x, int sub, int nmax, int imax) {
  AffineFit fits[16];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kSuperBlock / sub; ++j) {
    fits[j] = fit_affine(x + j * sub, sub, nmax, /*nonpositive_offset=*/true);
    max_scale = std::max(max_scale, fits[j].scale);
    max_min = std::max(max_min, -fits[j].offset);
  }
  AffineSuper best;
  best.error = std::numeric_limits<double>::infinity();
  for (const float f : kSuperStarts) {
    const float d = f16_rounded(max_scale / (static_cast<float>(imax) * f));
    const float dmin = f16_rounded(max_min / (static_cast<float>(imax) * f));
    AffineSuper c = affine_at(x, sub, nmax, imax, fits, d, dmin);
    if (c.error < best.error) best = c;
  }
  for (int round = 0; round < kSuperRefits; ++round) {
    float d, dmin;
    refit_affine_d(x, sub, best, &d, &dmin);
    if (d == best.d && dmin == best.dmin) break;
    AffineSuper c = affine_at(x, sub, nmax, imax, fits, d, dmin);
    if (!(c.error < best.error)) break;
    best = c;
  }
  return best;
}

}  // namespace quant

void quantize_row_blocks(const float* x, DType dtype, void* out, int64_t n) {
  dtype_row_bytes(dtype, n);  // throws unless n is a multiple of the block size
  switch (dtype) {
    case DType::Q4_1:
      return quant::quantize_row_q4_1(x, out, n);
    case DType::Q5_0:
      return quant::quantize_row_q5_0(x, out, n);
    case DType::Q5_1:
      return quant::quantize_row_q5_1(x, out, n);
    case DType::Q8_1:
      return quant::quantize_row_q8_1(x, out, n);
    case DType::Q2_K:
      return quant::quantize_row_q2_k(x, out, n);
    case DType::Q3_K:
      return quant::quantize_row_q3_k(x, out, n);
    case DType::Q4_K:
      return quant::quantize_row_q4_k(x, out, n);
    case DType::Q5_K:
      return quant::quantize_row_q5_k(x, out, n);
    case DType::Q6_K:
      return quant::quantize_row_q6_k(x, out, n);
    case DType::Q8_K:
      return quant::quantize_row_q8_k(x, out, n);
    case DType::IQ4_NL:
      return quant::quantize_row_iq4_nl(x, out, n);
    case DType::IQ4_XS:
      return quant::quantize_row_iq4_xs(x, out, n);
    default:
      throw Error(ErrorKind::Unsupported, std::string("quantize_row_blocks: ") + dtype_name(dtype) +
                                              " is not a block type");
  }
}

}  // namespace ember
