// Paged causal attention with an online softmax. One block of kWarps warps per (token, query
// head, split): the warps take turns over runs of 32 keys of the split's part of the token's
// context, read through the block table. In a run, lane i scores key i over its whole K row (one
// warp max and one warp sum per 32 keys, not per key), then every lane adds the 32 weighted V rows
// into its share of head_dim; the warps' partial results are merged at the end. Keys before the
// sliding window are never read (their blocks may be back in the pool: -1 entries).
//
// Split-K (flash-decoding): a decode step has few (token, head) pairs — 32 blocks for an 8B model
// at batch 1 on a GPU of 132 SMs — so a long context is cut into `splits` consecutive key ranges
// run by blocks of their own; each writes its unnormalized output with its (max, sum), and
// merge_splits_kernel rescales them to the common max. The split count is chosen on the host from
// the step's longest context, in powers of two, so a decode step's graph (step_graphs.h) is
// captured again only when the bucket changes; each block derives its key range on the device
// from the token's own position.
#include <algorithm>
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

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// s[g] = q_g . K[off .. off + hd) for the block's G query heads (q in shared memory, rows of
// kQRow floats): each 16-byte load of the K row (8 halves or 4 floats) serves every head; one
// value at a time where hd does not allow vector loads.
template <bool F16, int G, int kQRow>
__device__ __forceinline__ void key_scores(const void* k, int64_t off, const float (*q_s)[kQRow],
                                           int hd, float (&s)[G]) {
#pragma unroll
  for (int gq = 0; gq < G; ++gq) s[gq] = 0.0f;
  constexpr int kPerLoad = F16 ? 8 : 4;
  if (hd % kPerLoad == 0) {
    const uint4* row =
        reinterpret_cast<const uint4*>(static_cast<const char*>(k) + off * (F16 ? 2 : 4));
#pragma unroll 4
    for (int c = 0; c < hd / kPerLoad; ++c) {
      const uint4 raw = __ldg(row + c);
      float kv[kPerLoad];
      if constexpr (F16) {
        const __half2* h2 = reinterpret_cast<const __half2*>(&raw);
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float2 f = __half22float2(h2[i]);
          kv[2 * i] = f.x;
          kv[2 * i + 1] = f.y;
        }
      } else {
        kv[0] = __uint_as_float(raw.x);
        kv[1] = __uint_as_float(raw.y);
        kv[2] = __uint_as_float(raw.z);
        kv[3] = __uint_as_float(raw.w);
      }
#pragma unroll
      for (int gq = 0; gq < G; ++gq) {
        const float* qc = q_s[gq] + c * kPerLoad;
#pragma unroll
        for (int i = 0; i < kPerLoad; ++i) s[gq] += qc[i] * kv[i];
      }
    }
    return;
  }
  for (int d = 0; d < hd; ++d) {
    const float kd = kv_value<F16>(k, off + d);
#pragma unroll
    for (int gq = 0; gq < G; ++gq) s[gq] += q_s[gq][d] * kd;
  }
}

// kPerLane = ceil(head_dim / 32) output values per lane (element lane + 32 j). G query heads per
// block: 1 (blockIdx.y is the query head), or a whole GQA group (blockIdx.y is the KV head, and
// each K row and V row read serves the group's G heads).
template <int kPerLane, bool F16, int G>
__global__ void __launch_bounds__(kWarps * 32) attention_kernel(AttentionArgs a) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = a.list != nullptr ? a.list[blockIdx.x] : blockIdx.x;
  const int group = a.n_heads / a.kv.n_kv_heads;
  const int h0 = G == 1 ? static_cast<int>(blockIdx.y) : static_cast<int>(blockIdx.y) * G;
  const int g = h0 / group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hd = a.kv.head_dim;
  const int64_t ctx_end = static_cast<int64_t>(a.b.positions[t]) + 1;
  const int64_t window_begin = a.window > 0 && ctx_end > a.window ? ctx_end - a.window : 0;
  // This split's keys: [first, ctx) of [window_begin, ctx_end), in gridDim.z near-equal parts.
  const int64_t per_split = (ctx_end - window_begin + gridDim.z - 1) / gridDim.z;
  const int64_t first = window_begin + per_split * blockIdx.z;
  const int64_t ctx = first + per_split < ctx_end ? first + per_split : ctx_end;
  const int32_t* table = a.tables.tables + a.tables.table_offset[a.b.sequence_of[t]];

  // The heads' q in shared memory: every lane reads all of it (a broadcast) for its key.
  constexpr int kQRow = kPerLane * 32;
  __shared__ float q_s[G][kQRow];
  for (int i = threadIdx.x; i < G * hd; i += blockDim.x) {
    q_s[i / hd][i % hd] = a.q[(t * a.n_heads + h0 + i / hd) * hd + i % hd];
  }
  __syncthreads();
  float acc[G][kPerLane], m[G], l[G];
#pragma unroll
  for (int gq = 0; gq < G; ++gq) {
    m[gq] = -INFINITY;
    l[gq] = 0.0f;
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) acc[gq][j] = 0.0f;
  }
  // 32 keys per warp step: lane i scores key p0 + i (its whole K row), the warp takes one max and
  // one sum per head for the 32, then every lane adds the 32 weighted V rows for its elements.
  for (int64_t p0 = first + 32 * warp; p0 < ctx; p0 += 32 * kWarps) {
    const int64_t p = p0 + lane;
    int64_t off = 0;
    float s[G];
    if (p < ctx) {
      const int64_t block = table[p / a.kv.block_size];
      off = ((block * a.kv.n_kv_heads + g) * a.kv.block_size + p % a.kv.block_size) * hd;
      key_scores<F16, G, kQRow>(a.kv.k, off, q_s, hd, s);
#pragma unroll
      for (int gq = 0; gq < G; ++gq) {
        s[gq] *= a.scale;
        if (a.softcap > 0.0f) s[gq] = a.softcap * tanhf(s[gq] / a.softcap);
      }
    } else {
#pragma unroll
      for (int gq = 0; gq < G; ++gq) s[gq] = -INFINITY;
    }
    float w[G];
#pragma unroll
    for (int gq = 0; gq < G; ++gq) {
      const float m_new = fmaxf(m[gq], warp_max(s[gq]));  // finite: key p0 is in range
      const float correction = expf(m[gq] - m_new);       // 0 on the first keys (m = -inf)
      w[gq] = p < ctx ? expf(s[gq] - m_new) : 0.0f;
      l[gq] = l[gq] * correction + warp_sum(w[gq]);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) acc[gq][j] *= correction;
      m[gq] = m_new;
    }
    const int n_keys = ctx - p0 < 32 ? static_cast<int>(ctx - p0) : 32;
    for (int i = 0; i < n_keys; ++i) {
      const int64_t oi = __shfl_sync(0xffffffffu, off, i);
      float wi[G];
#pragma unroll
      for (int gq = 0; gq < G; ++gq) wi[gq] = __shfl_sync(0xffffffffu, w[gq], i);
#pragma unroll
      for (int j = 0; j < kPerLane; ++j) {
        const int d = lane + 32 * j;
        if (d < hd) {
          const float v = kv_value<F16>(a.kv.v, oi + d);
#pragma unroll
          for (int gq = 0; gq < G; ++gq) acc[gq][j] += wi[gq] * v;
        }
      }
    }
  }
  // Merge the warps: scale each warp's partial sums to the common max, per head.
  __shared__ float warp_m[kWarps][G], warp_l[kWarps][G];
  __shared__ float warp_acc[kWarps][G][kQRow];
#pragma unroll
  for (int gq = 0; gq < G; ++gq) {
    if (lane == 0) {
      warp_m[warp][gq] = m[gq];
      warp_l[warp][gq] = l[gq];
    }
#pragma unroll
    for (int j = 0; j < kPerLane; ++j) warp_acc[warp][gq][lane + 32 * j] = acc[gq][j];
  }
  __syncthreads();
  for (int gq = 0; gq < G; ++gq) {
    const int h = h0 + gq;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, warp_m[w][gq]);
    float l_all = 0.0f;
    float factor[kWarps];
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      factor[w] = warp_m[w][gq] == -INFINITY ? 0.0f : expf(warp_m[w][gq] - m_all);
      l_all += warp_l[w][gq] * factor[w];
    }
    if (a.partial != nullptr) {
      // Split-K: this split's unnormalized output, then its max and sum (m = -inf: no key here).
      float* ph =
          a.partial +
          ((static_cast<int64_t>(blockIdx.x) * a.n_heads + h) * gridDim.z + blockIdx.z) * (hd + 2);
      for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) o += warp_acc[w][gq][d] * factor[w];
        ph[d] = o;
      }
      if (threadIdx.x == 0) {
        ph[hd] = m_all;
        ph[hd + 1] = l_all;
      }
      continue;
    }
    float* oh = a.out + (t * a.n_heads + h) * hd;
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) o += warp_acc[w][gq][d] * factor[w];
      oh[d] = l_all > 0.0f ? o / l_all : 0.0f;
    }
  }
}

// One block per (listed token, head), a thread per output element: the splits' outputs rescaled
// to their common max and divided by the common sum.
__global__ void merge_splits_kernel(AttentionArgs a, int splits) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = a.list != nullptr ? a.list[blockIdx.x] : blockIdx.x;
  const int h = blockIdx.y;
  const int hd = a.kv.head_dim;
  const float* ph =
      a.partial + (static_cast<int64_t>(blockIdx.x) * a.n_heads + h) * splits * (hd + 2);
  float m_all = -INFINITY;
  for (int z = 0; z < splits; ++z) m_all = fmaxf(m_all, ph[z * (hd + 2) + hd]);
  float* oh = a.out + (t * a.n_heads + h) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float o = 0.0f, l = 0.0f;
    for (int z = 0; z < splits; ++z) {
      const float* pz = ph + z * (hd + 2);
      const float f = pz[hd] == -INFINITY ? 0.0f : expf(pz[hd] - m_all);
      o += pz[d] * f;
      l += pz[hd + 1] * f;
    }
    oh[d] = l > 0.0f ? o / l : 0.0f;
  }
}

template <int kPerLane, int G>
void launch_group(const AttentionArgs& a, dim3 grid, cudaStream_t s) {
  if (a.kv.f16) {
    launch_dependent("attention", false, attention_kernel<kPerLane, true, G>, grid, kWarps * 32, s,
                     a);
  } else {
    launch_dependent("attention", false, attention_kernel<kPerLane, false, G>, grid, kWarps * 32, s,
                     a);
  }
}

template <int kPerLane>
void launch_per_lane(const AttentionArgs& a, dim3 grid, cudaStream_t s) {
  launch_group<kPerLane, 1>(a, grid, s);
}

// head_dim 64 or 128 with a GQA group of 2, 3, 4 or 8 query heads: a block per KV head.
template <int kPerLane>
bool launch_grouped(const AttentionArgs& a, dim3 grid, int group, cudaStream_t s) {
  switch (group) {
    case 2:
      launch_group<kPerLane, 2>(a, grid, s);
      return true;
    case 3:
      launch_group<kPerLane, 3>(a, grid, s);
      return true;
    case 4:
      launch_group<kPerLane, 4>(a, grid, s);
      return true;
    case 8:
      launch_group<kPerLane, 8>(a, grid, s);
      return true;
    default:
      return false;
  }
}

}  // namespace

int64_t attention_block_heads(const DeviceKvLayer& kv, int64_t n_heads, int64_t n_list,
                              bool group_heads) {
  // Grouping divides the blocks by the group size: only where (token, KV head) pairs are many
  // enough that the splits still fill the GPU (H200: an 8B shape, 8 KV heads, 110 -> 128 tok/s at
  // 8k context; SmolLM2's 3 KV heads at batch 1 lost 8%, 570 -> 522).
  constexpr int64_t kMinGroupedPairs = 8;
  const int64_t group = n_heads / std::max<int64_t>(kv.n_kv_heads, 1);
  const bool grouped = group_heads && n_list * kv.n_kv_heads >= kMinGroupedPairs &&
                       (kv.head_dim == 64 || kv.head_dim == 128) &&
                       (group == 2 || group == 3 || group == 4 || group == 8);
  return grouped ? kv.n_kv_heads : n_heads;
}

int64_t attention_splits(int64_t n_list, int64_t n_heads, int64_t longest_context, int sm_count) {
  // Enough blocks for two waves of the SMs, at least kMinKeysPerSplit keys each, a power of two.
  constexpr int64_t kMinKeysPerSplit = 256, kMaxSplits = 32;
  const int64_t pairs = std::max<int64_t>(n_list * n_heads, 1);
  const int64_t want = std::min({(2 * int64_t{sm_count} + pairs - 1) / pairs,
                                 longest_context / kMinKeysPerSplit, kMaxSplits});
  int64_t splits = 1;
  while (splits * 2 <= want) splits *= 2;
  return splits;
}

void launch_attention(const DeviceKvLayer& kv, const float* q, int64_t n_heads,
                      const AttentionScores& scores, DeviceTokens b, DeviceTables tables,
                      const int32_t* token_list, int64_t n_list, float* out, int64_t splits,
                      float* partial, bool group_heads, cudaStream_t s) {
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
                        token_list,
                        splits > 1 ? partial : nullptr};
  const int64_t block_heads = attention_block_heads(kv, n_heads, n_list, group_heads);
  const dim3 grid(static_cast<unsigned>(n_list), static_cast<unsigned>(block_heads),
                  static_cast<unsigned>(splits > 1 ? splits : 1));
  const int group = static_cast<int>(n_heads / kv.n_kv_heads);
  if (block_heads != n_heads) {
    if (kv.head_dim == 64) launch_grouped<2>(a, grid, group, s);
    if (kv.head_dim == 128) launch_grouped<4>(a, grid, group, s);
  } else {
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
  }
  check_launch("attention");
  if (splits > 1) {
    const int threads = std::min(256, (kv.head_dim + 31) / 32 * 32);
    launch_dependent("attention split merge", false, merge_splits_kernel,
                     dim3(static_cast<unsigned>(n_list), static_cast<unsigned>(n_heads)),
                     static_cast<unsigned>(threads), s, a, static_cast<int>(splits));
  }
}

}  // namespace ember::cuda
