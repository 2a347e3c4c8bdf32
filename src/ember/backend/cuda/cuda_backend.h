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

}  // namespace ember::cuda
