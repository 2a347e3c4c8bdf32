// Matrix-vector products for decode (T <= kMatvecMaxTokens tokens): the weights are read once, 16
// bytes per lane per load with several loads in flight, and every token's activations (f32)
// multiply them. One warp per output row; rows split over blocks of 8 warps. Decode is bound by
// the weight bytes, so these run at a large share of HBM bandwidth when N fills the GPU.
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
constexpr int kLoadsInFlight = 4;

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
#pragma unroll
      for (int b = 0; b < 4; ++b) out[4 * i + b] = static_cast<int8_t>((u >> (8 * b)) & 0xff);
    } else {  // kQ4: byte j holds element j (low nibble) and j + 16 (high nibble)
#pragma unroll
      for (int b = 0; b < 4; ++b) {
        const uint32_t byte = (u >> (8 * b)) & 0xff;
        out[4 * i + b] = static_cast<float>(static_cast<int>(byte & 0x0f) - 8);
        out[16 + 4 * i + b] = static_cast<float>(static_cast<int>(byte >> 4) - 8);
      }
    }
  }
}

// Up to kMaxMatrices matrices sharing x (Q/K/V, gate/up) in one launch: global row n walks the
// matrices' rows one after another.
constexpr int kMaxMatrices = 4;
struct MatrixSet {
  const uint8_t* data[kMaxMatrices];     // row data (quants for kQ8/kQ4)
  const uint16_t* scales[kMaxMatrices];  // kQ8/kQ4: f16 scales [rows, K / 32]
  float* y[kMaxMatrices];
  float* residual[kMaxMatrices];   // non-null: also residual += y (a fused residual add)
  int64_t rows_end[kMaxMatrices];  // cumulative row counts
  int64_t ldy[kMaxMatrices];
  int count;
};

// NORM: x is the input of an RMSNorm folded into this product (FoldedNorm): every block computes
// each token's 1 / RMS (the same sum, in the same order, as rmsnorm_kernel) and multiplies x by it
// and the norm's weight as it reads x; block 0 also writes the normalized rows to norm.out.
// Launched as a programmatic dependent (launch_dependent, device_math.cuh).
template <int KIND, int NT, bool NORM>
__global__ void __launch_bounds__(kWarpsPerBlock * 32)
    matvec_kernel(const float* __restrict__ x, int64_t K, int64_t row_stride, MatrixSet set,
                  FoldedNorm norm) {
  pdl_launch_dependents();
  pdl_wait();
  constexpr int E = KindTraits<KIND>::kElems;
  const int lane = threadIdx.x % 32;
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
  }
  int64_t n = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  int m = 0;
  while (m < set.count && n >= set.rows_end[m]) ++m;
  if (m == set.count) return;
  if (m > 0) n -= set.rows_end[m - 1];
  const int64_t chunks = K / E;
  const uint4* row = reinterpret_cast<const uint4*>(set.data[m] + n * row_stride);
  const uint16_t* row_scales = set.scales[m] != nullptr ? set.scales[m] + n * (K / 32) : nullptr;
  float acc[NT];
#pragma unroll
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;
  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * kLoadsInFlight) {
    uint4 raw[kLoadsInFlight];
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int64_t c = c0 + 32 * u;
      raw[u] = c < chunks ? __ldg(row + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kLoadsInFlight; ++u) {
      const int64_t c = c0 + 32 * u;
      if (c >= chunks) break;
      float wv[E];
      decode_chunk<KIND>(raw[u], wv);
      float d = 1.0f;
      if constexpr (KIND == kQ8 || KIND == kQ4) d = f16_bits_to_float(row_scales[c * E / 32]);
#pragma unroll
      for (int t = 0; t < NT; ++t) {
        const float4* xv = reinterpret_cast<const float4*>(x + t * K + c * E);
        float s = 0.0f;
#pragma unroll
        for (int e4 = 0; e4 < E / 4; ++e4) {
          float4 xx = __ldg(xv + e4);
          if constexpr (NORM) {
            const float4 nw = __ldg(reinterpret_cast<const float4*>(norm.weight + c * E) + e4);
            xx = make_float4(xx.x * inv_rms[t] * nw.x, xx.y * inv_rms[t] * nw.y,
                             xx.z * inv_rms[t] * nw.z, xx.w * inv_rms[t] * nw.w);
          }
          s += wv[4 * e4] * xx.x + wv[4 * e4 + 1] * xx.y + wv[4 * e4 + 2] * xx.z +
               wv[4 * e4 + 3] * xx.w;
        }
        acc[t] += d * s;
      }
    }
  }
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    const float s = warp_sum(acc[t]);
    if (lane == 0) {
      set.y[m][t * set.ldy[m] + n] = s;
      if (set.residual[m] != nullptr) set.residual[m][t * set.ldy[m] + n] += s;
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

template <int KIND, int NT>
void launch_kind(const float* x, std::span<const WeightMatrix* const> ws,
                 std::span<float* const> ys, float* residual, const FoldedNorm* norm,
                 cudaStream_t s) {
  MatrixSet set{};
  int64_t stride = ws[0]->row_bytes;
  if constexpr (KIND == kQ8 || KIND == kQ4)
    stride = quant_bytes_per_row(ws[0]->dtype, ws[0]->n_cols);
  int64_t rows = 0;
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
    set.ldy[i] = w.n_rows;
    rows += w.n_rows;
    set.rows_end[i] = rows;
  }
  const auto blocks = static_cast<unsigned>((rows + kWarpsPerBlock - 1) / kWarpsPerBlock);
  const FoldedNorm folded = norm != nullptr ? *norm : FoldedNorm{};
  const int64_t K = ws[0]->n_cols;
  const unsigned threads = kWarpsPerBlock * 32;
  if (norm != nullptr) {
    launch_dependent("matvec", /*by_default=*/true, matvec_kernel<KIND, NT, true>, blocks, threads,
                     s, x, K, stride, set, folded);
  } else {
    launch_dependent("matvec", /*by_default=*/true, matvec_kernel<KIND, NT, false>, blocks, threads,
                     s, x, K, stride, set, folded);
  }
}

template <int KIND>
void launch_tokens(const float* x, int64_t T, std::span<const WeightMatrix* const> ws,
                   std::span<float* const> ys, float* residual, const FoldedNorm* norm,
                   cudaStream_t s) {
  switch (T) {
    case 1:
      launch_kind<KIND, 1>(x, ws, ys, residual, norm, s);
      break;
    case 2:
      launch_kind<KIND, 2>(x, ws, ys, residual, norm, s);
      break;
    case 3:
      launch_kind<KIND, 3>(x, ws, ys, residual, norm, s);
      break;
    case 4:
      launch_kind<KIND, 4>(x, ws, ys, residual, norm, s);
      break;
    case 5:
      launch_kind<KIND, 5>(x, ws, ys, residual, norm, s);
      break;
    case 6:
      launch_kind<KIND, 6>(x, ws, ys, residual, norm, s);
      break;
    case 7:
      launch_kind<KIND, 7>(x, ws, ys, residual, norm, s);
      break;
    default:
      launch_kind<KIND, 8>(x, ws, ys, residual, norm, s);
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
                std::span<float* const> ys, float* residual, const FoldedNorm* norm,
                cudaStream_t s) {
  switch (kind) {
    case kQ8:
      launch_tokens<kQ8>(x, T, ws, ys, residual, norm, s);
      break;
    case kQ4:
      launch_tokens<kQ4>(x, T, ws, ys, residual, norm, s);
      break;
    case kF32:
      launch_tokens<kF32>(x, T, ws, ys, residual, norm, s);
      break;
    case kBF16:
      launch_tokens<kBF16>(x, T, ws, ys, residual, norm, s);
      break;
    default:
      launch_tokens<kF16>(x, T, ws, ys, residual, norm, s);
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
                   cudaStream_t s) {
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
               s);
    check_launch("matvec");
    i = j;
  }
}

}  // namespace ember::cuda
