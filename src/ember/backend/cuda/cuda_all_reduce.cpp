// CudaBackend::all_reduce_sum: tensor parallelism's partial sums added across the ranks' GPUs with
// NCCL (nccl_group.h), queued like any other launch so a decode step that holds them is still
// captured and replayed as one graph.
#include "ember/backend/cuda/cuda_backend_impl.h"
#include "ember/core/error.h"
#include "ember/parallel/communicator.h"

namespace ember::cuda {

void CudaBackend::all_reduce_sum(float* x, int64_t n, parallel::Communicator& ranks) {
  bind();
  if (nccl_ranks_ != &ranks) {
    if (nccl_ != nullptr) {
      throw Error(ErrorKind::Internal,
                  "cuda: all_reduce_sum over a second group of ranks (one per backend)");
    }
    // Every rank reaches its first all-reduce at the same place in the same step, so joining
    // here keeps the ranks' collectives (MPI's broadcast of NCCL's id) in one order.
    nccl_ = NcclGroup::join(ranks, device_);
    nccl_ranks_ = &ranks;
  }
  ranks.count_device_all_reduce(n);
  NcclGroup* group = nccl_.get();
  defer(
      kAllReduce, [=, this] { group->all_reduce_sum(x, n, stream_); }, x, n);
}

}  // namespace ember::cuda
