// CudaBackend::matmul: our matvec kernels for decode-sized steps, cuBLAS for the rest.
#include "ember/backend/cuda/cuda_backend_impl.h"
#include "ember/backend/cuda/cuda_check.h"
#include "ember/core/error.h"

#include <cstdint>
#include <vector>

namespace ember::cuda {

uint16_t* CudaBackend::scratch_halves(std::vector<DeviceBuffer>& slot, int64_t n) {
  const auto bytes = static_cast<size_t>(n) * 2;
  if (slot.empty() || slot.front().bytes() < bytes) {
    slot.clear();  // cudaFree synchronizes: nothing in flight still reads the old buffer
    slot.emplace_back(bytes + bytes / 4);
  }
  return static_cast<uint16_t*>(slot.front().get());
}

void CudaBackend::matmul(const float* x, int64_t rows, std::span<const WeightMatrix* const> ws,
                         std::span<float* const> ys) {
  bind();
  if (ws.size() != ys.size()) throw Error("cuda matmul: one output per matrix");
  if (rows <= kMatvecMaxTokens) {
    PendingMatvec mv;
    mv.x = x;
    mv.rows = rows;
    for (const WeightMatrix* w : ws) mv.matrices.push_back(*w);
    mv.outputs.assign(ys.begin(), ys.end());
    fold_norm(mv, ws);
    defer_matvec(std::move(mv));
    return;
  }
  // cuBLAS and its scratch buffers run now, after what is pending; the step is not a graph.
  flush(false);
  cudaEvent_t start = nullptr, stop = nullptr;
  if (profile_) {
    check(cudaEventCreate(&start), "event");
    check(cudaEventCreate(&stop), "event");
    check(cudaEventRecord(start, stream_), "event");
  }
  // x converted once for all the matrices that share it: to f16 for f16 weights, else bf16.
  const int64_t K = ws.empty() ? 0 : ws[0]->n_cols;
  const uint16_t* x_bf16 = nullptr;
  const uint16_t* x_f16 = nullptr;
  for (size_t i = 0; i < ws.size(); ++i) {
    const WeightMatrix& w = *ws[i];
    const uint16_t* xh = nullptr;
    if (w.dtype == DType::F16) {
      if (x_f16 == nullptr) {
        uint16_t* buf = scratch_halves(x_f16_, rows * K);
        launch_f32_to_f16(x, buf, rows * K, stream_);
        x_f16 = buf;
      }
      xh = x_f16;
    } else if (w.dtype != DType::F32) {
      if (x_bf16 == nullptr) {
        uint16_t* buf = scratch_halves(x_half_, rows * K);
        launch_f32_to_bf16(x, buf, rows * K, stream_);
        x_bf16 = buf;
      }
      xh = x_bf16;
    }
    gemm(x, xh, rows, w, ys[i]);
  }
  if (profile_) {
    check(cudaEventRecord(stop, stream_), "event");
    check(cudaEventSynchronize(stop), "profile");
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    gemm_ms_ += ms;
    gemm_count_ += static_cast<int64_t>(ws.size());
    for (const WeightMatrix* w : ws) gemm_flops_ += 2.0 * rows * w->n_rows * w->n_cols;
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
}

void CudaBackend::defer_matvec(PendingMatvec mv) {
  const size_t signature_start = signature_.bytes().size();
  signature_.add(static_cast<int>(mv.matrices.size()));
  for (const WeightMatrix& w : mv.matrices) signature_.add(w);
  for (float* y : mv.outputs) signature_.add(y);
  defer(
      kMatvec,
      [mv, this] {
        std::vector<const WeightMatrix*> wp;
        for (const WeightMatrix& w : mv.matrices) wp.push_back(&w);
        launch_matvec(mv.x, mv.rows, wp, mv.outputs, mv.residual,
                      mv.folds_norm ? &mv.norm : nullptr, sm_count_, stream_);
      },
      mv.x, mv.rows, mv.residual, mv.folds_norm, mv.norm.weight, mv.norm.eps, mv.norm.out);
  mv.signature_start = signature_start;
  last_matvec_ = std::move(mv);
  last_matvec_index_ = pending_.size() - 1;
}

void CudaBackend::fold_norm(PendingMatvec& mv, std::span<const WeightMatrix* const> ws) {
  // The norm must be the launch just before, write exactly this product's input (not in place),
  // and every matrix must take the vector kernels.
  if (!fuse_adds_ || pending_.empty() || last_norm_index_ != pending_.size() - 1 ||
      pending_ops_.back() != kRmsNorm) {
    return;
  }
  const PendingNorm& norm = last_norm_;
  if (norm.y != mv.x || norm.x == norm.y || norm.rows != mv.rows || ws.empty() ||
      norm.D != ws[0]->n_cols || reinterpret_cast<uintptr_t>(norm.weight) % 16 != 0 ||
      !matvec_folds_norm(norm.x, ws)) {
    return;
  }
  pending_.pop_back();
  pending_ops_.pop_back();
  signature_.truncate(norm.signature_start);
  last_norm_index_ = SIZE_MAX;
  mv.x = norm.x;
  mv.norm = FoldedNorm{norm.weight, norm.eps, norm.y};
  mv.folds_norm = true;
}

bool CudaBackend::fuse_residual_add(float* y, const float* x, int64_t count) {
  // The add must follow the matvec directly, read its only output, cover it exactly, and not add
  // into the matvec's own input (other warps still read it).
  if (!fuse_adds_ || pending_.empty() || last_matvec_index_ != pending_.size() - 1 ||
      pending_ops_.back() != kMatvec) {
    return false;
  }
  PendingMatvec mv = last_matvec_;
  if (mv.matrices.size() != 1 || mv.residual != nullptr || mv.outputs[0] != x ||
      mv.rows * mv.matrices[0].n_rows != count || y == mv.x || y == x ||
      (mv.folds_norm && y == mv.norm.out)) {
    return false;
  }
  pending_.pop_back();
  pending_ops_.pop_back();
  signature_.truncate(mv.signature_start);
  mv.residual = y;
  defer_matvec(std::move(mv));
  return true;
}

// Column-major view: y^T [N, T] = W [N, K] (row-major, so op T on a [K, N] column-major matrix)
// times x^T [K, T]. `xh` is x converted to the matrix's 16-bit type (bf16, or f16 for f16 weights).
void CudaBackend::gemm(const float* x, const uint16_t* xh, int64_t T, const WeightMatrix& w,
                       float* y) {
  const int N = static_cast<int>(w.n_rows), K = static_cast<int>(w.n_cols);
  const int n = static_cast<int>(T);
  const float one = 1.0f, zero = 0.0f;
  if (w.dtype == DType::F32) {
    check(cublasSgemm(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, N, n, K, &one,
                      static_cast<const float*>(w.data), K, x, K, &zero, y, N),
          "cublasSgemm");
    return;
  }
  const void* a = w.data;
  const cudaDataType_t type = w.dtype == DType::F16 ? CUDA_R_16F : CUDA_R_16BF;
  if (w.layout == WeightLayout::QuantsThenScales || dtype_is_quantized(w.dtype)) {
    uint16_t* wh = scratch_halves(w_dequant_, w.n_rows * w.n_cols);
    launch_dequantize_to_bf16(w, wh, stream_);
    a = wh;
  } else if (w.dtype != DType::BF16 && w.dtype != DType::F16) {
    throw Error(std::string("cuda gemm: no path for ") + dtype_name(w.dtype));
  }
  check(cublasGemmEx(cublas_, CUBLAS_OP_T, CUBLAS_OP_N, N, n, K, &one, a, type, K, xh, type, K,
                     &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

}  // namespace ember::cuda
