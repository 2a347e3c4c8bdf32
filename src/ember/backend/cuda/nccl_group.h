// NCCL for tensor parallelism on GPUs: the ranks of a tensor-parallel group (an MPI communicator,
// parallel/communicator.h) as one NCCL communicator, so the partial sums of W_O and W_down are
// added on the devices, in the backend's stream, without a trip through host memory. NCCL is loaded
// at run time (dlopen of libnccl.so.2): a cuda build runs on machines without it, and only --tp on
// cuda asks for it. nccl.h (from the CUDA toolkit) gives the types at build time; without it
// (EMBER_NCCL unset) join() says so.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

namespace ember::parallel {
class Communicator;
}

namespace ember::cuda {

class NcclGroup {
 public:
  // Every rank of `ranks` calls this together (a collective): rank 0 makes NCCL's unique id and
  // broadcasts it over `ranks`, each rank joins on `device`. Throws naming what is missing
  // (libnccl.so.2) or what NCCL refused (two ranks on one GPU, say).
  static std::unique_ptr<NcclGroup> join(parallel::Communicator& ranks, int device);
  virtual ~NcclGroup() = default;
  // x [n floats, device memory] becomes the sum over the ranks, enqueued on `stream` (also while
  // the stream is being captured into a CUDA graph). Every rank gets the same bits (NCCL's ring and
  // tree algorithms reduce each element once and hand the result on).
  virtual void all_reduce_sum(float* x, int64_t n, cudaStream_t stream) = 0;
  virtual int size() const = 0;
};

}  // namespace ember::cuda
