// Row-wise and elementwise kernels: embedding lookups, norms, activations, residual adds.
#include <cmath>

#include "ember/backend/cuda/block_dequant.cuh"
#include "ember/backend/cuda/cuda_check.h"
#include "ember/backend/cuda/device_math.cuh"
#include "ember/backend/cuda/kernels.h"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  return grid_stride_blocks(n, kThreads);
}

// x[t, c] = table[tokens[t], c] (or += table[positions[t], c]); grid (ceil(D / 256), T).
__global__ void embed_kernel(WeightMatrix table, const int32_t* rows, float* x, bool add) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t t = blockIdx.y;
  const int64_t D = table.n_cols;
  const int64_t r = rows[t];
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < D; c += gridDim.x * blockDim.x) {
    const float v = matrix_element_any(table, r, c);
    x[t * D + c] = add ? x[t * D + c] + v : v;
  }
}

// One block per row. RMSNorm: y = x / sqrt(mean(x^2) + eps) * w.
__global__ void rmsnorm_kernel(const float* x, const float* w, float* y, int64_t D, float eps) {
  pdl_launch_dependents();
  pdl_wait();
  const float* xr = x + blockIdx.x * D;
  float* yr = y + blockIdx.x * D;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_sum(ss);
  const float inv = rsqrtf(ss / static_cast<float>(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) yr[i] = xr[i] * inv * w[i];
}

// One block per row. LayerNorm with the two-pass variance (as the reference computes it).
__global__ void layernorm_kernel(const float* x, const float* w, const float* bias, float* y,
                                 int64_t D, float eps) {
  pdl_launch_dependents();
  pdl_wait();
  const float* xr = x + blockIdx.x * D;
  float* yr = y + blockIdx.x * D;
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) s += xr[i];
  const float mean = block_sum(s) / static_cast<float>(D);
  float v = 0.0f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) v += (xr[i] - mean) * (xr[i] - mean);
  const float inv = rsqrtf(block_sum(v) / static_cast<float>(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    yr[i] = (xr[i] - mean) * inv * w[i] + bias[i];
  }
}

__global__ void add_bias_kernel(float* y, const float* bias, int64_t total, int64_t n) {
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x)
    y[i] += bias[i % n];
}

__global__ void scale_kernel(float* x, float s, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] *= s;
}

__global__ void softcap_kernel(float* x, float cap, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    x[i] = cap * tanhf(x[i] / cap);
}

__global__ void add_kernel(float* y, const float* x, int64_t n) {
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    y[i] += x[i];
}

__global__ void silu_mul_kernel(const float* gate, const float* up, float* out, int64_t n) {
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

// GELU, tanh form, as GPT-2 and Gemma define it; times up when given (GeGLU).
__global__ void gelu_mul_kernel(const float* gate, const float* up, float* out, int64_t n) {
  pdl_launch_dependents();
  pdl_wait();
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float g = gate[i];
    const float gelu = 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)));
    out[i] = up != nullptr ? gelu * up[i] : gelu;
  }
}

__global__ void gather_rows_kernel(const float* x, int64_t D, const int32_t* rows, float* out) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t r = blockIdx.y;
  const float* src = x + static_cast<int64_t>(rows[r]) * D;
  for (int64_t c = blockIdx.x * blockDim.x + threadIdx.x; c < D; c += gridDim.x * blockDim.x)
    out[r * D + c] = src[c];
}

// One thread per column, walking the rows in order: a repeated row adds in the order given, as
// the host backends do (no atomics, the same sums every run).
__global__ void scatter_add_rows_kernel(const float* x, int64_t D, const int32_t* rows,
                                        const float* scales, int64_t n_rows, float* y) {
  pdl_launch_dependents();
  pdl_wait();
  const int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (c >= D) return;
  for (int64_t r = 0; r < n_rows; ++r) {
    y[static_cast<int64_t>(rows[r]) * D + c] += scales[r] * x[r * D + c];
  }
}

unsigned column_blocks(int64_t D) {
  return static_cast<unsigned>((D + kThreads - 1) / kThreads);
}

}  // namespace

void launch_embed(const WeightMatrix& table, DeviceTokens b, float* x, cudaStream_t s) {
  if (b.n_tokens == 0) return;
  launch_dependent("embed", false, embed_kernel, dim3(column_blocks(table.n_cols), b.n_tokens),
                   kThreads, s, table, b.tokens, x, false);
}

void launch_add_position_embeddings(const WeightMatrix& table, DeviceTokens b, float* x,
                                    cudaStream_t s) {
  if (b.n_tokens == 0) return;
  launch_dependent("add_position_embeddings", false, embed_kernel,
                   dim3(column_blocks(table.n_cols), b.n_tokens), kThreads, s, table, b.positions,
                   x, true);
}

void launch_rmsnorm(const float* x, const float* w, float* y, int64_t rows, int64_t D, float eps,
                    cudaStream_t s) {
  if (rows == 0) return;
  launch_dependent("rmsnorm", false, rmsnorm_kernel, static_cast<unsigned>(rows), kThreads, s, x, w,
                   y, D, eps);
}

void launch_layernorm(const float* x, const float* w, const float* bias, float* y, int64_t rows,
                      int64_t D, float eps, cudaStream_t s) {
  if (rows == 0) return;
  launch_dependent("layernorm", false, layernorm_kernel, static_cast<unsigned>(rows), kThreads, s,
                   x, w, bias, y, D, eps);
}

void launch_add_bias(float* y, const float* bias, int64_t rows, int64_t n, cudaStream_t s) {
  if (rows * n == 0) return;
  launch_dependent("add_bias", false, add_bias_kernel, grid_for(rows * n), kThreads, s, y, bias,
                   rows * n, n);
}

void launch_scale(float* x, float scale, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  scale_kernel<<<grid_for(n), kThreads, 0, s>>>(x, scale, n);
  check_launch("scale");
}

void launch_softcap(float* x, float cap, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  softcap_kernel<<<grid_for(n), kThreads, 0, s>>>(x, cap, n);
  check_launch("softcap");
}

void launch_add(float* y, const float* x, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  launch_dependent("add", false, add_kernel, grid_for(n), kThreads, s, y, x, n);
}

void launch_silu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  launch_dependent("silu_mul", false, silu_mul_kernel, grid_for(n), kThreads, s, gate, up, out, n);
}

void launch_gelu_mul(const float* gate, const float* up, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  launch_dependent("gelu_mul", false, gelu_mul_kernel, grid_for(n), kThreads, s, gate, up, out, n);
}

void launch_gather_rows(const float* x, int64_t D, const int32_t* rows, int64_t n_rows, float* out,
                        cudaStream_t s) {
  if (n_rows == 0) return;
  launch_dependent("gather_rows", false, gather_rows_kernel,
                   dim3(column_blocks(D), static_cast<unsigned>(n_rows)), kThreads, s, x, D, rows,
                   out);
}

void launch_scatter_add_rows(const float* x, int64_t D, const int32_t* rows, const float* scales,
                             int64_t n_rows, float* y, cudaStream_t s) {
  if (n_rows == 0 || D == 0) return;
  launch_dependent("scatter_add_rows", false, scatter_add_rows_kernel, column_blocks(D), kThreads,
                   s, x, D, rows, scales, n_rows, y);
}

}  // namespace ember::cuda
