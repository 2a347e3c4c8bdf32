// Conversions feeding cuBLAS: activations f32 -> bf16/f16, and q8_0/q4_0 weights -> bf16 (prefill
// of a quantized model multiplies on the tensor cores; the matrix is expanded once per matmul).
#include "ember/backend/cuda/cuda_check.h"
#include "ember/backend/cuda/device_math.cuh"
#include "ember/backend/cuda/kernels.h"

namespace ember::cuda {
namespace {

constexpr int kThreads = 256;

unsigned grid_for(int64_t n) {
  return grid_stride_blocks(n, kThreads);
}

__global__ void to_bf16_kernel(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(x[i]));
}

__global__ void to_f16_kernel(const float* x, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = __half_as_ushort(__float2half_rn(x[i]));
}

// One thread per element (grid-stride); runs once per prefill matmul, bandwidth-bound.
__global__ void dequantize_bf16_kernel(WeightMatrix w, uint16_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
    const float v = matrix_element(w, i / w.n_cols, i % w.n_cols);
    out[i] = __bfloat16_as_ushort(__float2bfloat16_rn(v));
  }
}

}  // namespace

void launch_f32_to_bf16(const float* x, uint16_t* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  to_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(x, out, n);
  check_launch("f32_to_bf16");
}

void launch_f32_to_f16(const float* x, uint16_t* out, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  to_f16_kernel<<<grid_for(n), kThreads, 0, s>>>(x, out, n);
  check_launch("f32_to_f16");
}

void launch_dequantize_to_bf16(const WeightMatrix& w, uint16_t* out, cudaStream_t s) {
  const int64_t n = w.n_rows * w.n_cols;
  if (n == 0) return;
  dequantize_bf16_kernel<<<grid_for(n), kThreads, 0, s>>>(w, out, n);
  check_launch("dequantize_to_bf16");
}

}  // namespace ember::cuda
