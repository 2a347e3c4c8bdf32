#include "ember/backend/backend.h"

#include "ember/backend/cpu/cpu_backend.h"
#include "ember/backend/reference/reference_backend.h"
#include "ember/core/error.h"

namespace ember {

void Backend::reserve(Activations& buffer, int64_t floats) {
  if (buffer.size_ >= floats) return;
  buffer.data_ = allocate_activations(floats);
  buffer.size_ = floats;
}

void Backend::matmul(const float* x, int64_t rows, std::initializer_list<const WeightMatrix*> ws,
                     std::initializer_list<float*> ys) {
  matmul(x, rows, std::span<const WeightMatrix* const>(ws.begin(), ws.size()),
         std::span<float* const>(ys.begin(), ys.size()));
}

std::shared_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.name == "cpu") return std::make_shared<cpu::CpuBackend>(options);
  if (options.name == "reference") return std::make_shared<reference::ReferenceBackend>(options);
  throw Error("unknown backend '" + options.name + "' (expected cpu or reference)");
}

}  // namespace ember
