// Matrix-vector products for decode (T <= kMatvecMaxTokens tokens): the weights are read once, 16
// bytes per lane per load with several loads in flight, and every token's activations (f32)
// multiply them. A warp takes 1, 2 or 4 output rows of one matrix (matvec_rows_per_warp); warps
// go in blocks of 8. Decode is bound by the weight bytes, so these run at a large share of HBM
// bandwidth when N fills the GPU.
#include <cstdint>
#include <span>

#include "ember/backend/cuda/block_dequant.cuh"
#include "ember/backend/cuda/cuda_check.h"
#include "ember/backend/cuda/device_math.cuh"
#include "ember/backend/cuda/kernels.h"
#include "ember/core/error.h"

namespace ember::cuda {
namespace {

constexpr int kWarpsPerBlock = 8;

// What 16 bytes of a row hold, per weight kind.
enum Kind { kF32, kF16, kBF16, kQ8, kQ4 };
template <int K>
struct KindTraits;
template <>
struct KindTraits<kF32> {
  static constexpr int kElems = 4;
};
template <>
struct KindTraits<kF16> {
  static constexpr int kElems = 8;
};
template <>
struct KindTraits<kBF16> {
  static constexpr int kElems = 8;
};
template <>
struct KindTraits<kQ8> {
  static constexpr int kElems = 16;
};
template <>
struct KindTraits<kQ4> {
  static constexpr int kElems = 32;
};

// The float 2^23 (0x4B000000): a byte b placed in its low mantissa bits reads as 2^23 + b.
constexpr uint32_t kMagic = 0x4B000000u;

// The elements of one 16-byte chunk as floats (quants without their block scale).
template <int KIND>
__device__ __forceinline__ void decode_chunk(const uint4& raw, float* out) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const uint32_t u = words[i];
    if constexpr (KIND == kF32) {
      out[i] = __uint_as_float(u);
    } else if constexpr (KIND == kBF16) {
      out[2 * i] = __uint_as_float(u << 16);
      out[2 * i + 1] = __uint_as_float(u & 0xffff0000u);
    } else if constexpr (KIND == kF16) {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&u));
      out[2 * i] = f.x;
      out[2 * i + 1] = f.y;
    } else if constexpr (KIND == kQ8) {
      // q + 128 as the low mantissa bits of 2^23: one byte permute and one add per value, exact
      // (an integer-to-float conversion runs at a quarter of the adds' rate).
      const uint32_t biased = u ^ 0x80808080u;
#pragma unroll
      for (int b = 0; b < 4; ++b)
        out[4 * i + b] = __uint_as_float(__byte_perm(biased, kMagic, 0x7440 + b)) - 8388736.0f;
    } else {  // kQ4: byte j holds element j (low nibble) and j + 16 (high nibble); n - 8 as above
      const uint32_t lo = u & 0x0f0f0f0fu, hi = (u >> 4) & 0x0f0f0f0fu;
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        out[4 * i + b] = __uint_as_float(__byte_perm(lo, kMagic, 0x7440 + b)) - 8388616.0f;
        out[16 + 4 * i + b] = __uint_as_float(__byte_perm(hi, kMagic, 0x7440 + b)) - 8388616.0f;
      }
    }
  }
}

// Up to kMaxMatrices matrices sharing x (Q/K/V, gate/up) in one launch. A warp takes R rows of one
// matrix (a row group); global group g walks the matrices' groups one after another.
constexpr int kMaxMatrices = 4;
struct MatrixSet {
  const uint8_t* data[kMaxMatrices];     // row data (quants for kQ8/kQ4)
  const uint16_t* scales[kMaxMatrices];  // kQ8/kQ4: f16 scales [rows, K / 32]
  float* y[kMaxMatrices];
  float* residual[kMaxMatrices];     // non-null: also residual += y (a fused residual add)
  int64_t rows[kMaxMatrices];        // each matrix's rows (= its ldy)
  int64_t groups_end[kMaxMatrices];  // cumulative row-group counts
  int count;
};

// The dot product of one 16-byte chunk of weights (decoded) with E activations.
template <int KIND>
__device__ __forceinline__ float chunk_dot(const uint4& raw, const float* xv) {
  constexpr int E = KindTraits<KIND>::kElems;
  float wv[E];
  decode_chunk<KIND>(raw, wv);
  float s = 0.0f;
#pragma unroll
  for (int e4 = 0; e4 < E / 4; ++e4) {
    s += wv[4 * e4] * xv[4 * e4] + wv[4 * e4 + 1] * xv[4 * e4 + 1] +
         wv[4 * e4 + 2] * xv[4 * e4 + 2] + wv[4 * e4 + 3] * xv[4 * e4 + 3];
  }
  return s;
}

// The activations of chunk c for token t, E floats (times the folded norm's 1 / RMS and weight).
template <int E, bool NORM>
__device__ __forceinline__ void load_x(const float* __restrict__ x, int64_t K, int t, int64_t c,
                                       float inv_rms, const float* norm_weight, float* xv) {
  const float4* xp = reinterpret_cast<const float4*>(x + t * K + c * E);
#pragma unroll
  for (int e4 = 0; e4 < E / 4; ++e4) {
    float4 xx = __ldg(xp + e4);
    if constexpr (NORM) {
      const float4 nw = __ldg(reinterpret_cast<const float4*>(norm_weight + c * E) + e4);
      xx = make_float4(xx.x * inv_rms * nw.x, xx.y * inv_rms * nw.y, xx.z * inv_rms * nw.z,
                       xx.w * inv_rms * nw.w);
    }
    xv[4 * e4] = xx.x;
    xv[4 * e4 + 1] = xx.y;
    xv[4 * e4 + 2] = xx.z;
    xv[4 * e4 + 3] = xx.w;
  }
}

// R rows per warp: each lane loads the same chunks of R rows (R x L 16-byte loads in flight).
// Each activation a lane reads serves all R rows (x is read from L1 once per R rows), except for
// quantized weights with several tokens, whose decoding costs more than the activations' loads:
// there each chunk is decoded once and multiplied with every token's activations. NORM: x is the
// input of an RMSNorm folded into this product (FoldedNorm): every block computes each token's 1 /
// RMS (the same sum, in the same order, as rmsnorm_kernel) and multiplies x by it and the norm's
// weight as it reads x; block 0 also writes the normalized rows to norm.out. Launched as a
// programmatic dependent (launch_dependent, device_math.cuh); with `early` each warp issues its
// first round of weight loads before waiting for the kernel before (the weights are never written
// by it), so those loads overlap that kernel's tail and this one's norm.
template <int KIND, int NT, bool NORM, int R, int L>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    matvec_kernel(const float* __restrict__ x, int64_t K, int64_t row_stride, MatrixSet set,
                  FoldedNorm norm, bool early) {
  pdl_launch_dependents();
  constexpr int E = KindTraits<KIND>::kElems;
  constexpr bool kQuantized = KIND == kQ8 || KIND == kQ4;
  const int lane = threadIdx.x % 32;
  // This warp's rows: from the launch's parameters alone, so known before the wait.
  int64_t g = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  int m = 0;
  while (m < set.count && g >= set.groups_end[m]) ++m;
  const bool has_rows = m < set.count;
  if (!has_rows) m = 0;
  if (m > 0) g -= set.groups_end[m - 1];
  const int64_t n0 = g * R, n_rows = set.rows[m];
  const int64_t chunks = K / E;
  // A group's rows past the matrix's end read its last row again and write nothing.
  const uint4* row[R];
  const uint16_t* row_scales[R];
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int64_t n = n0 + r < n_rows ? n0 + r : n_rows - 1;
    row[r] = reinterpret_cast<const uint4*>(set.data[m] + n * row_stride);
    row_scales[r] = kQuantized ? set.scales[m] + n * (K / 32) : nullptr;
  }
  uint4 raw[L][R];
  auto load_round = [&](int64_t c0) {
#pragma unroll
    for (int u = 0; u < L; ++u) {
      const int64_t c = c0 + 32 * u;
#pragma unroll
      for (int r = 0; r < R; ++r)
        raw[u][r] = c < chunks ? __ldg(row[r] + c) : make_uint4(0, 0, 0, 0);
    }
  };
  if (early && has_rows) load_round(lane);
  pdl_wait();
  float inv_rms[NT];
  if constexpr (NORM) {
    __shared__ float block_inv[NT];
    for (int t = 0; t < NT; ++t) {
      float ss = 0.0f;
      for (int64_t i = threadIdx.x; i < K; i += blockDim.x) ss += x[t * K + i] * x[t * K + i];
      ss = block_sum(ss);
      if (threadIdx.x == 0) block_inv[t] = rsqrtf(ss / static_cast<float>(K) + norm.eps);
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < NT; ++t) inv_rms[t] = block_inv[t];
    if (blockIdx.x == 0 && norm.out != nullptr) {
      for (int t = 0; t < NT; ++t) {
        for (int64_t i = threadIdx.x; i < K; i += blockDim.x)
          norm.out[t * K + i] = x[t * K + i] * inv_rms[t] * norm.weight[i];
      }
    }
  } else {
#pragma unroll
    for (int t = 0; t < NT; ++t) inv_rms[t] = 1.0f;
  }
  if (!has_rows) return;
  float acc[R][NT];
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
  }
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * L) {
    if (!early || c0 != lane) load_round(c0);
#pragma unroll
    for (int u = 0; u < L; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c >= chunks) break;
      float xv[E];
      if constexpr (kQuantized && NT > 1) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
          const float d = f16_bits_to_float(row_scales[r][c * E / 32]);
          float wv[E];
          decode_chunk<KIND>(raw[u][r], wv);
#pragma unroll
          for (int t = 0; t < NT; ++t) {
            load_x<E, NORM>(x, K, t, c, inv_rms[t], norm.weight, xv);
            float s = 0.0f;
#pragma unroll
            for (int e = 0; e < E; e += 4)
              s += wv[e] * xv[e] + wv[e + 1] * xv[e + 1] + wv[e + 2] * xv[e + 2] +
                   wv[e + 3] * xv[e + 3];
            acc[r][t] += d * s;
          }
        }
      } else {
        float d[R];
#pragma unroll
        for (int r = 0; r < R; ++r)
          d[r] = kQuantized ? f16_bits_to_float(row_scales[r][c * E / 32]) : 1.0f;
#pragma unroll
        for (int t = 0; t < NT; ++t) {
          load_x<E, NORM>(x, K, t, c, inv_rms[t], norm.weight, xv);
#pragma unroll
          for (int r = 0; r < R; ++r) {
            if constexpr (kQuantized) {
              acc[r][t] += d[r] * chunk_dot<KIND>(raw[u][r], xv);
            } else {
              acc[r][t] += chunk_dot<KIND>(raw[u][r], xv);
            }
          }
        }
      }
    }
  }
  const int64_t ldy = n_rows;
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float s = warp_sum(acc[r][t]);
      if (lane == 0 && n0 + r < n_rows) {
        set.y[m][t * ldy + n0 + r] = s;
        if (set.residual[m] != nullptr) set.residual[m][t * ldy + n0 + r] += s;
      }
    }
  }
}

// GGML block types in the file's Rows layout (block_dequant.cuh): one warp per row, each lane
// decodes groups of 32 values and multiplies them with every token's activations.
template <int NT>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    matvec_groups_kernel(const float* __restrict__ x, WeightMatrix w, float* __restrict__ y,
                         float* residual) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (n >= w.n_rows) return;
  const int64_t K = w.n_cols;
  const uint8_t* row = static_cast<const uint8_t*>(w.data) + n * w.row_bytes;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (int64_t g = lane; g < K / 32; g += 32) {
    float v[32];
    dequantize_group(w.dtype, row, g, v);
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float4* xv = reinterpret_cast<const float4*>(x + t * K + 32 * g);
      float s = 0.0f;
#pragma unroll
      for (int e4 = 0; e4 < 8; ++e4) {
        const float4 xx = __ldg(xv + e4);
        s += v[4 * e4] * xx.x + v[4 * e4 + 1] * xx.y + v[4 * e4 + 2] * xx.z + v[4 * e4 + 3] * xx.w;
      }
      acc[t] += s;
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) {
      y[t * w.n_rows + n] = s;
      if (residual != nullptr) residual[t * w.n_rows + n] += s;
    }
  }
}

void launch_groups(const float* x, int64_t T, const WeightMatrix& w, float* y, float* residual,
                   cudaStream_t s) {
  const auto blocks = static_cast<unsigned>((w.n_rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const unsigned threads = kWarpsPerBlock * 32;
  switch (T) {
    case 1:
      matvec_groups_kernel<1><<<blocks, threads, 0, s>>>(x, w, y, residual);
      break;
    case 2:
      matvec_groups_kernel<2><<<blocks, threads, 0, s>>>(x, w, y, residual);
      break;
    case 3:
      matvec_groups_kernel<3><<<blocks, threads, 0, s>>>(x, w, y, residual);
      break;
    case 4:
      matvec_groups_kernel<4><<<blocks, threads, 0, s>>>(x, w, y, residual);
      break;
    case 5:
      matvec_groups_kernel<5><<<blocks, threads, 0, s>>>(x, w, y, residual);
      break;
    case 6:
      matvec_groups_kernel<6><<<blocks, threads, 0, s>>>(x, w, y, residual);
      break;
    case 7:
      matvec_groups_kernel<7><<<blocks, threads, 0, s>>>(x, w, y, residual);
      break;
    default:
      matvec_groups_kernel<8><<<blocks, threads, 0, s>>>(x, w, y, residual);
      break;
  }
}

// Any K and alignment, any uploaded dtype: one element at a time (tiny models' odd rows).
__global__ void matvec_any_kernel(const float* x, int64_t T, WeightMatrix w, float* y, int64_t ldy,
                                  float* residual) {
  const int lane = threadIdx.x % 32;
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (n >= w.n_rows) return;
  const int64_t K = w.n_cols;
  for (int64_t t = 0; t < T; ++t) {
    float acc = 0.0f;
    for (int64_t k = lane; k < K; k += 32) acc += matrix_element_any(w, n, k) * x[t * K + k];
    acc = warp_sum(acc);
    if (lane == 0) {
      y[t * ldy + n] = acc;
      if (residual != nullptr) residual[t * ldy + n] += acc;
    }
  }
}

// Loads in flight per row: 8 16-byte loads per lane in all where a warp takes 2 or 4 rows.
template <int R>
constexpr int loads_per_row() {
  return R == 4 ? 2 : 4;
}

template <int KIND, int NT, int R>
void launch_rows(const float* x, std::span<const WeightMatrix* const> ws,
                 std::span<float* const> ys, float* residual, const FoldedNorm* norm,
                 cudaStream_t s) {
  MatrixSet set{};
  int64_t stride = ws[0]->row_bytes;
  if constexpr (KIND == kQ8 || KIND == kQ4)
    stride = quant_bytes_per_row(ws[0]->dtype, ws[0]->n_cols);
  int64_t groups = 0;
  set.count = static_cast<int>(ws.size());
  for (int i = 0; i < set.count; ++i) {
    const WeightMatrix& w = *ws[static_cast<size_t>(i)];
    set.data[i] = static_cast<const uint8_t*>(w.data);
    set.scales[i] = nullptr;
    if constexpr (KIND == kQ8 || KIND == kQ4) {
      set.scales[i] = reinterpret_cast<const uint16_t*>(set.data[i] + w.n_rows * stride);
    }
    set.y[i] = ys[static_cast<size_t>(i)];
    set.residual[i] = residual != nullptr && i == 0 ? residual : nullptr;
    set.rows[i] = w.n_rows;
    groups += (w.n_rows + R - 1) / R;
    set.groups_end[i] = groups;
  }
  const auto blocks = static_cast<unsigned>((groups + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const FoldedNorm folded = norm != nullptr ? *norm : FoldedNorm{};
  const int64_t K = ws[0]->n_cols;
  const unsigned threads = kWarpsPerBlock * 32;
  constexpr int kL = loads_per_row<R>();
  if (norm != nullptr) {
    launch_dependent("matvec", /*by_default=*/true, matvec_kernel<KIND, NT, true, R, kL>, blocks,
                     threads, s, x, K, stride, set, folded, matvec_early_loads());
  } else {
    launch_dependent("matvec", /*by_default=*/true, matvec_kernel<KIND, NT, false, R, kL>, blocks,
                     threads, s, x, K, stride, set, folded, matvec_early_loads());
  }
}

template <int KIND, int NT>
void launch_kind(const float* x, std::span<const WeightMatrix* const> ws,
                 std::span<float* const> ys, float* residual, const FoldedNorm* norm, int sm_count,
                 cudaStream_t s) {
  int64_t rows = 0;
  for (const WeightMatrix* w : ws) rows += w->n_rows;
  switch (matvec_rows_per_warp(rows, NT, KIND == kQ8 || KIND == kQ4, sm_count)) {
    case 4:
      launch_rows<KIND, NT, 4>(x, ws, ys, residual, norm, s);
      break;
    case 2:
      launch_rows<KIND, NT, 2>(x, ws, ys, residual, norm, s);
      break;
    default:
      launch_rows<KIND, NT, 1>(x, ws, ys, residual, norm, s);
      break;
  }
}

template <int KIND>
void launch_tokens(const float* x, int64_t T, std::span<const WeightMatrix* const> ws,
                   std::span<float* const> ys, float* residual, const FoldedNorm* norm,
                   int sm_count, cudaStream_t s) {
  switch (T) {
    case 1:
      launch_kind<KIND, 1>(x, ws, ys, residual, norm, sm_count, s);
      break;
    case 2:
      launch_kind<KIND, 2>(x, ws, ys, residual, norm, sm_count, s);
      break;
    case 3:
      launch_kind<KIND, 3>(x, ws, ys, residual, norm, sm_count, s);
      break;
    case 4:
      launch_kind<KIND, 4>(x, ws, ys, residual, norm, sm_count, s);
      break;
    case 5:
      launch_kind<KIND, 5>(x, ws, ys, residual, norm, sm_count, s);
      break;
    case 6:
      launch_kind<KIND, 6>(x, ws, ys, residual, norm, sm_count, s);
      break;
    case 7:
      launch_kind<KIND, 7>(x, ws, ys, residual, norm, sm_count, s);
      break;
    default:
      launch_kind<KIND, 8>(x, ws, ys, residual, norm, sm_count, s);
      break;
  }
}

// The vector kernel's kind for w, or -1 when only matvec_any_kernel can take it.
int vector_kind(const float* x, const WeightMatrix& w) {
  const int64_t K = w.n_cols;
  const bool aligned =
      reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w.data) % 16 == 0;
  if (!aligned) return -1;
  if (w.layout == WeightLayout::QuantsThenScales && K % 32 == 0) {
    if (w.dtype == DType::Q8_0) return kQ8;
    if (w.dtype == DType::Q4_0) return kQ4;
    return -1;
  }
  if (w.layout != WeightLayout::Rows) return -1;
  if (w.dtype == DType::F32 && K % 4 == 0) return kF32;
  if (w.dtype == DType::BF16 && K % 8 == 0) return kBF16;
  if (w.dtype == DType::F16 && K % 8 == 0) return kF16;
  return -1;
}

void launch_set(int kind, const float* x, int64_t T, std::span<const WeightMatrix* const> ws,
                std::span<float* const> ys, float* residual, const FoldedNorm* norm, int sm_count,
                cudaStream_t s) {
  switch (kind) {
    case kQ8:
      launch_tokens<kQ8>(x, T, ws, ys, residual, norm, sm_count, s);
      break;
    case kQ4:
      launch_tokens<kQ4>(x, T, ws, ys, residual, norm, sm_count, s);
      break;
    case kF32:
      launch_tokens<kF32>(x, T, ws, ys, residual, norm, sm_count, s);
      break;
    case kBF16:
      launch_tokens<kBF16>(x, T, ws, ys, residual, norm, sm_count, s);
      break;
    default:
      launch_tokens<kF16>(x, T, ws, ys, residual, norm, sm_count, s);
      break;
  }
}

}  // namespace

bool matvec_folds_norm(const float* x, std::span<const WeightMatrix* const> ws) {
  for (const WeightMatrix* w : ws) {
    if (vector_kind(x, *w) < 0) return false;
  }
  return !ws.empty();
}

void launch_matvec(const float* x, int64_t T, std::span<const WeightMatrix* const> ws,
                   std::span<float* const> ys, float* residual, const FoldedNorm* norm,
                   int sm_count, cudaStream_t s) {
  if (T == 0 || ws.empty()) return;
  if (T > kMatvecMaxTokens) throw Error("cuda matvec: more tokens than kMatvecMaxTokens");
  if (residual != nullptr && ws.size() != 1)
    throw Error("cuda matvec: a residual needs one matrix");
  if (norm != nullptr &&
      (!matvec_folds_norm(x, ws) || reinterpret_cast<uintptr_t>(norm->weight) % 16 != 0)) {
    throw Error("cuda matvec: a folded norm needs the vector kernels");
  }
  FoldedNorm later;  // launches after the first apply the norm without writing it again
  if (norm != nullptr) later = {norm->weight, norm->eps, nullptr};
  // Runs of matrices of the same kind (and K) go out in one launch, up to kMaxMatrices at a time.
  size_t i = 0;
  while (i < ws.size()) {
    const int kind = vector_kind(x, *ws[i]);
    if (kind < 0 && is_group_dtype(ws[i]->dtype) && ws[i]->layout == WeightLayout::Rows &&
        reinterpret_cast<uintptr_t>(x) % 16 == 0 && ws[i]->n_cols % 32 == 0) {
      launch_groups(x, T, *ws[i], ys[i], residual, s);
      check_launch("matvec");
      ++i;
      continue;
    }
    if (kind < 0) {
      const WeightMatrix& w = *ws[i];
      const auto blocks = static_cast<unsigned>((w.n_rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
      matvec_any_kernel<<<blocks, kWarpsPerBlock * 32, 0, s>>>(x, T, w, ys[i], w.n_rows, residual);
      check_launch("matvec");
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < ws.size() && j - i < kMaxMatrices && vector_kind(x, *ws[j]) == kind &&
           ws[j]->n_cols == ws[i]->n_cols && ws[j]->dtype == ws[i]->dtype) {
      ++j;
    }
    launch_set(kind, x, T, ws.subspan(i, j - i), ys.subspan(i, j - i), residual,
               norm == nullptr ? nullptr
               : i == 0        ? norm
                               : &later,
               sm_count, s);
    check_launch("matvec");
    i = j;
  }
}

}  // namespace ember::cuda
