// RoPE and writes into the paged KV cache.
#include "ember/backend/cuda/cuda_check.h"
#include "ember/backend/cuda/device_math.cuh"
#include "ember/backend/cuda/kernels.h"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;

// One thread per (token, head, i < rope_dim / 2): rotates the pair (i, i + rope_dim / 2). The
// angle is a float product, as HF computes it; sincosf is the accurate (range-reduced) form.
__global__ void rope_kernel(float* x, int64_t n_heads, int64_t head_dim, int64_t half,
                            const float* inv_freq, const int32_t* positions, int64_t total) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= total) return;
  const int64_t i = idx % half;
  const int64_t th = idx / half;  // token * n_heads + head
  const int64_t t = th / n_heads;
  float* v = x + th * head_dim;
  const float angle = static_cast<float>(positions[t]) * inv_freq[i];
  float s, c;
  sincosf(angle, &s, &c);
  const float a = v[i], b = v[i + half];
  v[i] = a * c - b * s;
  v[i + half] = b * c + a * s;
}

// One thread per (token, kv head, d).
__global__ void store_kv_kernel(DeviceKvLayer kv, const float* k, const float* v, DeviceTokens b,
                                DeviceTables tables, int64_t total) {
  const int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (idx >= total) return;
  const int64_t kvd = static_cast<int64_t>(kv.n_kv_heads) * kv.head_dim;
  const int64_t t = idx / kvd;
  const int64_t e = idx % kvd;  // g * head_dim + d
  const int64_t g = e / kv.head_dim, d = e % kv.head_dim;
  const int32_t pos = b.positions[t];
  const int32_t* table = tables.tables + tables.table_offset[b.sequence_of[t]];
  const int64_t block = table[pos / kv.block_size];
  const int64_t off =
      ((block * kv.n_kv_heads + g) * kv.block_size + pos % kv.block_size) * kv.head_dim + d;
  if (kv.f16) {
    static_cast<__half*>(kv.k)[off] = __float2half_rn(k[idx]);
    static_cast<__half*>(kv.v)[off] = __float2half_rn(v[idx]);
  } else {
    static_cast<float*>(kv.k)[off] = k[idx];
    static_cast<float*>(kv.v)[off] = v[idx];
  }
}

// rope() on Q and K and store_kv() in one pass: one block of head_dim threads per (token, head of
// Q then K); thread d computes output element d (both elements of a pair are read before either is
// written). K heads also write K and V into the cache.
__global__ void rope_store_kernel(float* q, float* k, const float* v, int32_t n_heads,
                                  int32_t rope_dim, const float* inv_freq, DeviceKvLayer kv,
                                  DeviceTokens b, DeviceTables tables) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int h = blockIdx.y;
  const int d = threadIdx.x;
  const int hd = kv.head_dim;
  const bool is_k = h >= n_heads;
  const int g = h - n_heads;
  float* x = is_k ? k + (t * kv.n_kv_heads + g) * hd : q + (t * n_heads + h) * hd;
  const int32_t pos = b.positions[t];
  const int half = rope_dim / 2;
  float out = x[d];
  if (d < rope_dim) {
    const int i = d < half ? d : d - half;
    const float angle = static_cast<float>(pos) * inv_freq[i];
    float sn, cs;
    sincosf(angle, &sn, &cs);
    const float a = x[i], bb = x[i + half];
    out = d < half ? a * cs - bb * sn : bb * cs + a * sn;
  }
  __syncthreads();
  x[d] = out;
  if (!is_k) return;
  const int32_t* table = tables.tables + tables.table_offset[b.sequence_of[t]];
  const int64_t block = table[pos / kv.block_size];
  const int64_t off = ((block * kv.n_kv_heads + g) * kv.block_size + pos % kv.block_size) * hd + d;
  const float vv = v[(t * kv.n_kv_heads + g) * hd + d];
  if (kv.f16) {
    static_cast<__half*>(kv.k)[off] = __float2half_rn(out);
    static_cast<__half*>(kv.v)[off] = __float2half_rn(vv);
  } else {
    static_cast<float*>(kv.k)[off] = out;
    static_cast<float*>(kv.v)[off] = vv;
  }
}

unsigned blocks_for(int64_t n) {
  return static_cast<unsigned>((n + kThreads - 1) / kThreads);
}

}  // namespace

void launch_rope(float* x, int64_t n_heads, int64_t head_dim, int64_t rope_dim,
                 const float* inv_freq, DeviceTokens b, cudaStream_t s) {
  const int64_t half = rope_dim / 2;
  const int64_t total = static_cast<int64_t>(b.n_tokens) * n_heads * half;
  if (total == 0) return;
  rope_kernel<<<blocks_for(total), kThreads, 0, s>>>(x, n_heads, head_dim, half, inv_freq,
                                                     b.positions, total);
  check_launch("rope");
}

void launch_store_kv(const DeviceKvLayer& kv, const float* k, const float* v, DeviceTokens b,
                     DeviceTables tables, cudaStream_t s) {
  const int64_t total = static_cast<int64_t>(b.n_tokens) * kv.n_kv_heads * kv.head_dim;
  if (total == 0) return;
  store_kv_kernel<<<blocks_for(total), kThreads, 0, s>>>(kv, k, v, b, tables, total);
  check_launch("store_kv");
}

void launch_rope_store_kv(const DeviceKvLayer& kv, float* q, float* k, const float* v,
                          int64_t n_heads, int64_t rope_dim, const float* inv_freq, DeviceTokens b,
                          DeviceTables tables, cudaStream_t s) {
  if (b.n_tokens == 0) return;
  const dim3 grid(static_cast<unsigned>(b.n_tokens),
                  static_cast<unsigned>(n_heads + kv.n_kv_heads));
  launch_dependent("rope_store_kv", false, rope_store_kernel, grid,
                   static_cast<unsigned>(kv.head_dim), s, q, k, v, static_cast<int32_t>(n_heads),
                   static_cast<int32_t>(rope_dim), inv_freq, kv, b, tables);
}

}  // namespace ember::cuda
