#include "ember/backend/backend.h"

#include <cstring>

#include "ember/backend/cpu/cpu_backend.h"
#include "ember/backend/reference/reference_backend.h"
#include "ember/core/error.h"
#include "ember/parallel/communicator.h"
#ifdef EMBER_CUDA
#include "ember/backend/cuda/cuda_backend.h"
#endif

namespace ember {

void Backend::reserve(Activations& buffer, int64_t floats) {
  if (buffer.size_ >= floats) return;
  buffer.data_ = allocate_activations(floats);
  buffer.size_ = floats;
}

std::string KvShape::dtype_label() const {
  std::string label = dtype_name(k_dtype);
  if (k_channel_scales) label.push_back('c');
  if (v_dtype != k_dtype || k_channel_scales) {
    label.push_back('/');
    label.append(dtype_name(v_dtype));
  }
  return label;
}

void Backend::from_host(float* data, const float* host, int64_t n) {
  std::memcpy(data, host, static_cast<size_t>(n) * sizeof(float));
}

void Backend::all_reduce_sum(float* x, int64_t n, parallel::Communicator& ranks) {
  ranks.all_reduce_sum(x, n);
}

void Backend::matmul(const float* x, int64_t rows, std::initializer_list<const WeightMatrix*> ws,
                     std::initializer_list<float*> ys) {
  matmul(x, rows, std::span<const WeightMatrix* const>(ws.begin(), ws.size()),
         std::span<float* const>(ys.begin(), ys.size()));
}

void Backend::matmul_groups(std::span<const MatmulGroup> groups) {
  for (const MatmulGroup& g : groups) matmul(g.x, g.rows, g.matrices(), g.outputs());
}

void Backend::check_token(int32_t token, const WeightMatrix& table) {
  if (token < 0 || token >= table.n_rows) {
    throw Error("token id " + std::to_string(token) + " is outside the vocabulary (size " +
                std::to_string(table.n_rows) + ")");
  }
}

void Backend::check_position(int32_t position, const WeightMatrix& table) {
  if (position < 0 || position >= table.n_rows) {
    throw Error("position " + std::to_string(position) + " is past the model's " +
                std::to_string(table.n_rows) + " learned positions");
  }
}

std::shared_ptr<Backend> make_backend(const BackendOptions& options) {
  if (options.name == "cpu") return std::make_shared<cpu::CpuBackend>(options);
  if (options.name == "reference") return std::make_shared<reference::ReferenceBackend>(options);
  if (options.name == "cuda") {
#ifdef EMBER_CUDA
    return cuda::make_cuda_backend(options);
#else
    throw Error(
        ErrorKind::Unsupported,
        "--backend cuda: this ember was built without CUDA (configure with -DEMBER_CUDA=ON)");
#endif
  }
  throw Error::invalid_request(
      "--backend", "unknown backend '" + options.name + "' (expected cpu, reference or cuda)");
}

}  // namespace ember
