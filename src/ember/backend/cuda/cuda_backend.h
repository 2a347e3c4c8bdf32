// The CUDA backend's entry points (built with -DEMBER_CUDA=ON; backend.cpp calls them). This header
// names no CUDA type, so the rest of ember includes nothing from the toolkit.
#pragma once

#include <memory>
#include <string>

#include "ember/backend/backend.h"

namespace ember::cuda {

// A backend on GPU `options.device`; throws ember::Error naming the reason (no driver, no such
// device, out of memory).
std::shared_ptr<Backend> make_cuda_backend(const BackendOptions& options);

// Number of CUDA devices this process can use (0 without a driver or a GPU); `why` gets the
// driver's reason when there are none.
int cuda_device_count(std::string* why = nullptr);

// Rows of a matrix each warp of the decode matvec kernels takes: 1, 2 or 4 forces it (tests and
// benchmarks, as EMBER_CUDA_MATVEC_ROWS does), anything else restores the choice by shape.
void set_matvec_rows_per_warp(int rows);
// Whether the decode matvec kernels issue their first weight loads before waiting for the kernel
// before them: 0 no, anything else yes (the default; EMBER_CUDA_MATVEC_EARLY=0 turns it off).
void set_matvec_early_loads(int on);

}  // namespace ember::cuda
