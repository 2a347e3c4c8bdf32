// Every CUDA runtime and cuBLAS call is checked: a failure becomes an ember::Error naming the call
// and the driver's reason (out of memory, no device, a kernel fault), never a silent wrong answer.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <string>

#include "ember/core/error.h"

namespace ember::cuda {

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* what) {
  throw Error(e == cudaErrorMemoryAllocation ? ErrorKind::ResourceExhausted : ErrorKind::Internal,
              std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw_cuda_error(e, what);
}

inline void check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS) {
    throw Error(std::string("cuda: ") + what + ": cuBLAS status " + cublasGetStatusString(s));
  }
}

// After a kernel launch: launch-configuration errors surface here, at the op that caused them.
inline void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

}  // namespace ember::cuda
