// Paged causal attention with an online softmax. One block of kWarps warps per (token, query
// head): each warp walks every kWarps-th key of the token's context through the block table (one
// key per step: lanes split head_dim, a warp sum gives the score), keeps a running max, sum and
// weighted V; the warps' partial results are merged at the end. Keys before the sliding window
// are never read (their blocks may be back in the pool: -1 entries).
#include <cmath>

#include "ember/backend/cuda/cuda_check.h"
#include "ember/backend/cuda/device_math.cuh"
#include "ember/backend/cuda/kernels.h"
#include "ember/core/error.h"

namespace ember::cuda {
namespace {

constexpr int kWarps = 4;

template <bool F16>
__device__ __forceinline__ float kv_value(const void* base, int64_t i) {
  if constexpr (F16) {
    return __half2float(static_cast<const __half*>(base)[i]);
  } else {
    return static_cast<const float*>(base)[i];
  }
}

// kPerLane = ceil(head_dim / 32) values of q, and of the output, per lane (element lane + 32 j).
template <int kPerLane, bool F16>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(AttentionArgs a) {
  const int64_t t = a.list != nullptr ? a.list[blockIdx.x] : blockIdx.x;
  const int h = blockIdx.y;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hd = a.kv.head_dim;
  const int g = h / (a.n_heads / a.kv.n_kv_heads);
  const int64_t ctx = static_cast<int64_t>(a.b.positions[t]) + 1;
  const int64_t first = a.window > 0 && ctx > a.window ? ctx - a.window : 0;
  const int32_t* table = a.tables.tables + a.tables.table_offset[a.b.sequence_of[t]];

  const float* qh = a.q + (t * a.n_heads + h) * hd;
  float q[kPerLane], acc[kPerLane];
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) {
    const int d = lane + 32 * j;
    q[j] = d < hd ? qh[d] : 0.0f;
    acc[j] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  for (int64_t p = first + warp; p < ctx; p += kWarps) {
    const int64_t block = table[p / a.kv.block_size];
    const int64_t off =
        ((block * a.kv.n_kv_heads + g) * a.kv.block_size + p % a.kv.block_size) * hd;
    float dot = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      if (d < hd) dot += q[j] * kv_value<F16>(a.kv.k, off + d);
    }
    float s = warp_sum(dot) * a.scale;
    if (a.softcap > 0.0f) s = a.softcap * tanhf(s / a.softcap);
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);  // 0 on the first key (m = -inf)
    const float w = expf(s - m_new);
    l = l * correction + w;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) {
      const int d = lane + 32 * j;
      const float v = d < hd ? kv_value<F16>(a.kv.v, off + d) : 0.0f;
      acc[j] = acc[j] * correction + w * v;
    }
    m = m_new;
  }
  // Merge the warps: scale each warp's partial sums to the common max.
  __shared__ float warp_m[kWarps], warp_l[kWarps];
  __shared__ float warp_acc[kWarps][kPerLane * 32];
  if (lane == 0) {
    warp_m[warp] = m;
    warp_l[warp] = l;
  }
#pragma unroll
  for (int j = 0; j < kPerLane; ++j) warp_acc[warp][lane + 32 * j] = acc[j];
  __syncthreads();
  float m_all = -INFINITY;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, warp_m[w]);
  float l_all = 0.0f;
  float factor[kWarps];
#pragma unroll
  for (int w = 0; w < kWarps; ++w) {
    factor[w] = warp_m[w] == -INFINITY ? 0.0f : expf(warp_m[w] - m_all);
    l_all += warp_l[w] * factor[w];
  }
  float* oh = a.out + (t * a.n_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) o += warp_acc[w][d] * factor[w];
    oh[d] = l_all > 0.0f ? o / l_all : 0.0f;
  }
}

template <int kPerLane>
void launch_per_lane(const AttentionArgs& a, dim3 grid, cudaStream_t s) {
  if (a.kv.f16) {
    attention_kernel<kPerLane, true><<<grid, kWarps * 32, 0, s>>>(a);
  } else {
    attention_kernel<kPerLane, false><<<grid, kWarps * 32, 0, s>>>(a);
  }
}

}  // namespace

void launch_attention(const DeviceKvLayer& kv, const float* q, int64_t n_heads,
                      const AttentionScores& scores, DeviceTokens b, DeviceTables tables,
                      const int32_t* token_list, int64_t n_list, float* out, cudaStream_t s) {
  if (n_list == 0) return;
  if (kv.head_dim > 256) {
    throw Error(ErrorKind::Unsupported,
                "cuda attention: head_dim " + std::to_string(kv.head_dim) + " > 256");
  }
  const AttentionArgs a{kv,
                        q,
                        out,
                        static_cast<int32_t>(n_heads),
                        scores.scale,
                        scores.softcap,
                        scores.window,
                        b,
                        tables,
                        token_list};
  const dim3 grid(static_cast<unsigned>(n_list), static_cast<unsigned>(n_heads));
  switch ((kv.head_dim + 31) / 32) {
    case 1:
      launch_per_lane<1>(a, grid, s);
      break;
    case 2:
      launch_per_lane<2>(a, grid, s);
      break;
    case 3:
      launch_per_lane<3>(a, grid, s);
      break;
    case 4:
      launch_per_lane<4>(a, grid, s);
      break;
    case 5:
      launch_per_lane<5>(a, grid, s);
      break;
    case 6:
      launch_per_lane<6>(a, grid, s);
      break;
    case 7:
      launch_per_lane<7>(a, grid, s);
      break;
    default:
      launch_per_lane<8>(a, grid, s);
      break;
  }
  check_launch("attention");
}

}  // namespace ember::cuda
