// Prefill attention on the tensor cores (flash-attention style): one block of 4 warps takes a tile
// of up to 64 consecutive query tokens of one sequence and one query head; each warp owns 16 of
// the queries. Key/value tiles of 64 positions are read through the block table into shared
// memory as f16, S = Q K^T and O += P V run as mma.sync m16n8k16 (f16 inputs, f32
// accumulators), and the softmax is online (running max and sum per query row). Masking covers the
// causal limit, the sliding window and the tile's ragged ends; soft-capping is applied to S.
//
// Fragment layouts (PTX ISA, mma.m16n8k16 .row.col): lane = 4 g + t;
//   A (16x16): a0 = (g, 2t..2t+1), a1 = (g+8, 2t..), a2 = (g, 2t+8..), a3 = (g+8, 2t+8..)
//   B (16x8):  b0 = (k 2t..2t+1, n g), b1 = (k 2t+8.., n g)
//   C (16x8):  c0,c1 = (g, 2t..2t+1), c2,c3 = (g+8, 2t..2t+1)
#include <cuda_fp16.h>

#include <cmath>

#include "ember/backend/cuda/cuda_check.h"
#include "ember/backend/cuda/device_math.cuh"
#include "ember/backend/cuda/kernels.h"

namespace ember::cuda {
namespace {

static_assert(kAttentionTileQueries == 64, "a block is 4 warps of 16 queries");
constexpr int kKeys = 64;  // per shared-memory tile
constexpr int kPad = 8;    // halves of padding per shared row (bank spread)

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ void mma_f16(float* c, const uint32_t* a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 8 consecutive head_dim values of one cache row as f16, in one 16-byte word.
template <bool F16>
__device__ __forceinline__ uint4 load_kv_chunk(const void* base, int64_t i) {
  if constexpr (F16) {
    return *reinterpret_cast<const uint4*>(static_cast<const __half*>(base) + i);
  } else {
    const float4* f = reinterpret_cast<const float4*>(static_cast<const float*>(base) + i);
    const float4 a = f[0], b = f[1];
    uint4 out;
    out.x = pack_half2(a.x, a.y);
    out.y = pack_half2(a.z, a.w);
    out.z = pack_half2(b.x, b.y);
    out.w = pack_half2(b.z, b.w);
    return out;
  }
}

// B fragments of V (16 keys x 8 dims) from V stored [key][dim]: ldmatrix .trans hands lane (g, t)
// the values (key 2t, dim g), (key 2t + 1, dim g) of each 8 x 8 block, as mma's B layout wants.
__device__ __forceinline__ void load_v_fragment(const __half* row_of_lane, uint32_t& b0,
                                                uint32_t& b1) {
  const auto addr = static_cast<uint32_t>(__cvta_generic_to_shared(row_of_lane));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(b0), "=r"(b1)
               : "r"(addr));
}

// What one block works on: a tile of consecutive query tokens of one sequence, one query head.
struct Tile {
  const int32_t* table;  // the sequence's block table
  int64_t pos0;          // position of the first query (the tile's positions are consecutive)
  int64_t last_pos;      // of the last query
  int first_token, n_tokens, head, kv_head;
};

// Q fragments of this lane's rows (row1 = row0 + 8), pre-scaled, as f16 A operands [HD / 16][4].
// Rows past the tile repeat its last token (their results are never written).
template <int HD>
__device__ __forceinline__ void load_q(const AttentionArgs& a, const Tile& tile, int row0, int t,
                                       uint32_t (&qf)[HD / 16][4]) {
  auto qrow = [&](int row) -> const float* {
    const int r = row < tile.n_tokens ? row : tile.n_tokens - 1;
    return a.q + (static_cast<int64_t>(tile.first_token + r) * a.n_heads + tile.head) * HD;
  };
  const float* q0 = qrow(row0);
  const float* q1 = qrow(row0 + 8);
#pragma unroll
  for (int kc = 0; kc < HD / 16; ++kc) {
    const int d = kc * 16 + 2 * t;
    qf[kc][0] = pack_half2(q0[d] * a.scale, q0[d + 1] * a.scale);
    qf[kc][1] = pack_half2(q1[d] * a.scale, q1[d + 1] * a.scale);
    qf[kc][2] = pack_half2(q0[d + 8] * a.scale, q0[d + 9] * a.scale);
    qf[kc][3] = pack_half2(q1[d + 8] * a.scale, q1[d + 9] * a.scale);
  }
}

// K and V of positions [k0, k0 + kKeys) into shared memory as f16 rows, 16 bytes per load; keys
// past the tile's last position are zero (and masked later). Unrolled so that each thread's loads
// are all in flight at once (one rolled iteration at a time left the kernel waiting on memory
// latency): first the cache offsets of its keys, then K, then V.
template <int HD, bool F16>
__device__ __forceinline__ void load_kv_tile(const AttentionArgs& a, const Tile& tile, int64_t k0,
                                             __half (*k_s)[HD + kPad], __half (*v_s)[HD + kPad]) {
  constexpr int kChunks = HD / 8;
  constexpr int kIters = kKeys * kChunks / 128;
  // Offsets in units of 8 values (a layer holds < 2^35 values); kNone: past last_pos.
  constexpr uint32_t kNone = 0xffffffffu;
  uint32_t off[kIters];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = threadIdx.x + it * 128;
    const int64_t p = k0 + i / kChunks;
    off[it] = kNone;
    if (p <= tile.last_pos) {
      const int64_t block = tile.table[p / a.kv.block_size];
      off[it] = static_cast<uint32_t>(
          ((block * a.kv.n_kv_heads + tile.kv_head) * a.kv.block_size + p % a.kv.block_size) *
              kChunks +
          i % kChunks);
    }
  }
  uint4 chunk[kIters];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    chunk[it] = off[it] != kNone ? load_kv_chunk<F16>(a.kv.k, int64_t{off[it]} * 8)
                                 : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = threadIdx.x + it * 128;
    *reinterpret_cast<uint4*>(&k_s[i / kChunks][(i % kChunks) * 8]) = chunk[it];
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    chunk[it] = off[it] != kNone ? load_kv_chunk<F16>(a.kv.v, int64_t{off[it]} * 8)
                                 : make_uint4(0, 0, 0, 0);
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int i = threadIdx.x + it * 128;
    *reinterpret_cast<uint4*>(&v_s[i / kChunks][(i % kChunks) * 8]) = chunk[it];
  }
}

// S [16 x kKeys] of this warp = Q K^T over the shared K tile.
template <int HD>
__device__ __forceinline__ void tile_scores(const uint32_t (&qf)[HD / 16][4],
                                            const __half (*k_s)[HD + kPad], int g, int t,
                                            float (&s)[kKeys / 8][4]) {
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) {
    s[nt][0] = s[nt][1] = s[nt][2] = s[nt][3] = 0.0f;
#pragma unroll
    for (int kc = 0; kc < HD / 16; ++kc) {
      const uint32_t b0 = *reinterpret_cast<const uint32_t*>(&k_s[nt * 8 + g][kc * 16 + 2 * t]);
      const uint32_t b1 = *reinterpret_cast<const uint32_t*>(&k_s[nt * 8 + g][kc * 16 + 2 * t + 8]);
      mma_f16(s[nt], qf[kc], b0, b1);
    }
  }
}

// Soft-cap and mask S in place (keys after a query, or out of its window, get -inf; `whole`
// tiles need no mask) and return the two rows' maxima over the tile (reduced over the row's lanes).
__device__ __forceinline__ float2 mask_scores(const AttentionArgs& a, int64_t k0, int64_t qpos0,
                                              bool whole, int t, float (&s)[kKeys / 8][4]) {
  float m0 = -INFINITY, m1 = -INFINITY;
#pragma unroll
  for (int nt = 0; nt < kKeys / 8; ++nt) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      float v = s[nt][e];
      if (a.softcap > 0.0f) v = a.softcap * tanhf(v / a.softcap);
      if (!whole) {
        const int64_t kp = k0 + nt * 8 + 2 * t + (e & 1);
        const int64_t qp = e < 2 ? qpos0 : qpos0 + 8;
        const bool visible = kp <= qp && (a.window <= 0 || qp - kp < a.window);
        v = visible ? v : -INFINITY;
      }
      s[nt][e] = v;
      if (e < 2) {
        m0 = fmaxf(m0, v);
      } else {
        m1 = fmaxf(m1, v);
      }
    }
  }
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    m0 = fmaxf(m0, __shfl_xor_sync(0xffffffffu, m0, off));
    m1 = fmaxf(m1, __shfl_xor_sync(0xffffffffu, m1, off));
  }
  return make_float2(m0, m1);
}

// P = exp(S - base) as f16 A fragments (two n-tiles of S make one 16-key k-chunk); O += P V;
// the rows' partial sums of P into l0 / l1.
template <int HD>
__device__ __forceinline__ void accumulate_pv(const float (&s)[kKeys / 8][4], float base0,
                                              float base1, const __half (*v_s)[HD + kPad], int lane,
                                              float (&o)[HD / 8][4], float& l0, float& l1) {
#pragma unroll
  for (int kc = 0; kc < kKeys / 16; ++kc) {
    float p[2][4];
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      // __expf (ex2.approx, ~2 ulp): P is rounded to f16 right after, far coarser.
      p[j][0] = __expf(s[2 * kc + j][0] - base0);
      p[j][1] = __expf(s[2 * kc + j][1] - base0);
      p[j][2] = __expf(s[2 * kc + j][2] - base1);
      p[j][3] = __expf(s[2 * kc + j][3] - base1);
      l0 += p[j][0] + p[j][1];
      l1 += p[j][2] + p[j][3];
    }
    const uint32_t pa[4] = {pack_half2(p[0][0], p[0][1]), pack_half2(p[0][2], p[0][3]),
                            pack_half2(p[1][0], p[1][1]), pack_half2(p[1][2], p[1][3])};
    // Lanes 0-15 address the 16 key rows of this k-chunk (ldmatrix .x2 reads those).
    const __half* v_row = &v_s[kc * 16 + (lane % 16)][0];
#pragma unroll
    for (int nt = 0; nt < HD / 8; ++nt) {
      uint32_t b0, b1;
      load_v_fragment(v_row + nt * 8, b0, b1);
      mma_f16(o[nt], pa, b0, b1);
    }
  }
}

// O / l for this lane's two rows, written where the rows are inside the tile.
template <int HD>
__device__ __forceinline__ void write_rows(const AttentionArgs& a, const Tile& tile, int row0,
                                           int t, const float (&o)[HD / 8][4], float l0, float l1) {
#pragma unroll
  for (int off = 1; off < 4; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  const float inv0 = l0 > 0.0f ? 1.0f / l0 : 0.0f, inv1 = l1 > 0.0f ? 1.0f / l1 : 0.0f;
  auto out_row = [&](int row) {
    return a.out + (static_cast<int64_t>(tile.first_token + row) * a.n_heads + tile.head) * HD;
  };
#pragma unroll
  for (int nt = 0; nt < HD / 8; ++nt) {
    const int d = nt * 8 + 2 * t;
    if (row0 < tile.n_tokens) {
      out_row(row0)[d] = o[nt][0] * inv0;
      out_row(row0)[d + 1] = o[nt][1] * inv0;
    }
    if (row0 + 8 < tile.n_tokens) {
      out_row(row0 + 8)[d] = o[nt][2] * inv1;
      out_row(row0 + 8)[d + 1] = o[nt][3] * inv1;
    }
  }
}

template <int HD, bool F16>
__global__ void __launch_bounds__(128, 3) attention_tile_kernel(AttentionArgs a) {
  __shared__ __align__(16) __half k_s[kKeys][HD + kPad];
  __shared__ __align__(16) __half v_s[kKeys][HD + kPad];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, t = lane % 4;
  Tile tile;
  tile.first_token = a.list[2 * blockIdx.x];
  tile.n_tokens = a.list[2 * blockIdx.x + 1];
  tile.head = blockIdx.y;
  tile.kv_head = tile.head / (a.n_heads / a.kv.n_kv_heads);
  tile.table = a.tables.tables + a.tables.table_offset[a.b.sequence_of[tile.first_token]];
  tile.pos0 = a.b.positions[tile.first_token];
  tile.last_pos = tile.pos0 + tile.n_tokens - 1;

  // This lane's two query rows: g and g + 8 of the warp's 16.
  const int row0 = warp * 16 + g;
  const int64_t qpos0 = tile.pos0 + row0;
  uint32_t qf[HD / 16][4];
  load_q<HD>(a, tile, row0, t, qf);
  float o[HD / 8][4];
#pragma unroll
  for (int i = 0; i < HD / 8; ++i) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;

  int64_t key_begin = 0;
  if (a.window > 0 && tile.pos0 + 1 > a.window) key_begin = tile.pos0 + 1 - a.window;
  for (int64_t k0 = key_begin; k0 <= tile.last_pos; k0 += kKeys) {
    __syncthreads();  // the previous tile's readers are done
    load_kv_tile<HD, F16>(a, tile, k0, k_s, v_s);
    __syncthreads();
    float s[kKeys / 8][4];
    tile_scores<HD>(qf, k_s, g, t, s);
    // Keys every query of the block sees (before its first position, inside every window).
    const bool whole =
        k0 + kKeys - 1 < tile.pos0 && (a.window <= 0 || tile.last_pos - k0 < a.window);
    const float2 tile_m = mask_scores(a, k0, qpos0, whole, t, s);
    // Online softmax: rescale what was summed so far to the new running maxima. A row that has
    // seen no visible key yet keeps base 0 (exp(-inf) = 0, never NaN).
    const float new_m0 = fmaxf(m0, tile_m.x), new_m1 = fmaxf(m1, tile_m.y);
    const float base0 = new_m0 == -INFINITY ? 0.0f : new_m0;
    const float base1 = new_m1 == -INFINITY ? 0.0f : new_m1;
    const float c0 = __expf(m0 - base0), c1 = __expf(m1 - base1);
    m0 = new_m0;
    m1 = new_m1;
    l0 *= c0;
    l1 *= c1;
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) {
      o[i][0] *= c0;
      o[i][1] *= c0;
      o[i][2] *= c1;
      o[i][3] *= c1;
    }
    accumulate_pv<HD>(s, base0, base1, v_s, lane, o, l0, l1);
  }
  write_rows<HD>(a, tile, row0, t, o, l0, l1);
}

template <int HD>
void launch_hd(const AttentionArgs& a, dim3 grid, cudaStream_t s) {
  if (a.kv.f16) {
    attention_tile_kernel<HD, true><<<grid, 128, 0, s>>>(a);
  } else {
    attention_tile_kernel<HD, false><<<grid, 128, 0, s>>>(a);
  }
}

}  // namespace

bool attention_tiles_support(int64_t head_dim) {
  return head_dim == 64 || head_dim == 128;
}

void launch_attention_tiles(const DeviceKvLayer& kv, const float* q, int64_t n_heads,
                            const AttentionScores& scores, DeviceTokens b, DeviceTables tables,
                            const int32_t* tiles, int64_t n_tiles, float* out, cudaStream_t s) {
  if (n_tiles == 0) return;
  const AttentionArgs a{
      kv, q,      out,  static_cast<int32_t>(n_heads), scores.scale, scores.softcap, scores.window,
      b,  tables, tiles};
  const dim3 grid(static_cast<unsigned>(n_tiles), static_cast<unsigned>(n_heads));
  if (kv.head_dim == 64) {
    launch_hd<64>(a, grid, s);
  } else {
    launch_hd<128>(a, grid, s);
  }
  check_launch("attention_tiles");
}

}  // namespace ember::cuda
