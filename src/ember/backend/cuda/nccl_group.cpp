#include "ember/backend/cuda/nccl_group.h"

#include <string>

#include "ember/core/error.h"
#include "ember/parallel/communicator.h"

#ifdef EMBER_NCCL
#include <dlfcn.h>
#include <nccl.h>
#endif

namespace ember::cuda {

#ifdef EMBER_NCCL
namespace {

// The NCCL entry points ember calls, looked up once in libnccl.so.2.
struct NcclApi {
  decltype(&ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&ncclCommInitRank) comm_init_rank = nullptr;
  decltype(&ncclCommDestroy) comm_destroy = nullptr;
  decltype(&ncclAllReduce) all_reduce = nullptr;
  decltype(&ncclGetErrorString) error_string = nullptr;
  decltype(&ncclGetLastError) last_error = nullptr;
};

template <typename Fn>
void look_up(void* lib, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (fn == nullptr) {
    throw Error(ErrorKind::Unsupported,
                std::string("cuda: libnccl.so.2 lacks ") + name + " (NCCL 2.x is needed)");
  }
}

const NcclApi& nccl_api() {
  static const NcclApi api = [] {
    void* lib = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) lib = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      throw Error(ErrorKind::Unsupported,
                  std::string("--tp with --backend cuda adds the ranks' partial sums with NCCL, "
                              "and libnccl.so.2 could not be loaded (") +
                      dlerror() +
                      "): install NCCL, or add the folder that holds it to LD_LIBRARY_PATH");
    }
    NcclApi a;
    look_up(lib, "ncclGetUniqueId", a.get_unique_id);
    look_up(lib, "ncclCommInitRank", a.comm_init_rank);
    look_up(lib, "ncclCommDestroy", a.comm_destroy);
    look_up(lib, "ncclAllReduce", a.all_reduce);
    look_up(lib, "ncclGetErrorString", a.error_string);
    look_up(lib, "ncclGetLastError", a.last_error);
    return a;
  }();
  return api;
}

void check(ncclResult_t r, ncclComm_t comm, const char* what) {
  if (r == ncclSuccess) return;
  const NcclApi& api = nccl_api();
  std::string detail = api.error_string(r);
  const char* last = api.last_error(comm);
  if (last != nullptr && *last != '\0') detail += std::string(" (") + last + ")";
  throw Error(std::string("cuda: NCCL ") + what + ": " + detail);
}

class NcclComm final : public NcclGroup {
 public:
  NcclComm(parallel::Communicator& ranks, int device) : size_(ranks.size()) {
    const NcclApi& api = nccl_api();
    ncclUniqueId id{};
    if (ranks.rank() == 0) check(api.get_unique_id(&id), nullptr, "ncclGetUniqueId");
    ranks.broadcast_bytes(&id, sizeof id, 0, false);
    if (cudaSetDevice(device) != cudaSuccess) throw Error("cuda: cudaSetDevice for NCCL failed");
    check(api.comm_init_rank(&comm_, ranks.size(), id, ranks.rank()), nullptr, "ncclCommInitRank");
  }
  ~NcclComm() override {
    if (comm_ != nullptr) nccl_api().comm_destroy(comm_);
  }
  void all_reduce_sum(float* x, int64_t n, cudaStream_t stream) override {
    check(nccl_api().all_reduce(x, x, static_cast<size_t>(n), ncclFloat32, ncclSum, comm_, stream),
          comm_, "ncclAllReduce");
  }
  int size() const override { return size_; }

 private:
  ncclComm_t comm_ = nullptr;
  int size_ = 1;
};

}  // namespace

std::unique_ptr<NcclGroup> NcclGroup::join(parallel::Communicator& ranks, int device) {
  return std::make_unique<NcclComm>(ranks, device);
}

#else

std::unique_ptr<NcclGroup> NcclGroup::join(parallel::Communicator&, int) {
  throw Error(ErrorKind::Unsupported,
              "--tp with --backend cuda adds the ranks' partial sums with NCCL, and this ember "
              "was built without nccl.h (install NCCL's headers beside the CUDA toolkit, rebuild)");
}

#endif

}  // namespace ember::cuda
