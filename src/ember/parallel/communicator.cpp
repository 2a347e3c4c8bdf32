#include "ember/parallel/communicator.h"

#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "ember/core/error.h"

#ifdef EMBER_MPI
#include <mpi.h>
#endif

namespace ember::parallel {

namespace {

class SingleProcess final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, int64_t) override {}
  void all_gather(const void* mine, int64_t bytes, void* all) override {
    std::memcpy(all, mine, static_cast<size_t>(bytes));
  }
  void send(const float*, int64_t, int) override {}
  void receive(float*, int64_t, int) override {}
  // A world of one has no other rank to send to or receive from.
  int64_t start_send(const void*, int64_t, int, int) override { return 0; }
  int64_t start_receive(void*, int64_t, int, int) override { return 0; }
  void finish_transfer(int64_t, const char*, bool) override {}
  bool transfer_done(int64_t) override { return true; }
  void broadcast(float*, int64_t, int) override {}
  void broadcast_bytes(void*, int64_t, int, bool) override {}
  [[noreturn]] void abort(int code) override { std::exit(code); }
  std::unique_ptr<Communicator> split(int, int) override {
    return std::make_unique<SingleProcess>();
  }
};

#ifdef EMBER_MPI
double rank_timeout_seconds();

int count_of(int64_t n, const char* what) {
  if (n < 0 || n > INT_MAX) {
    throw Error(std::string("MPI: a ") + what + " of " + std::to_string(n) +
                " elements is larger than one MPI call takes");
  }
  return static_cast<int>(n);
}

// MPI_COMM_WORLD (made first: initialises MPI) or a part of it (split()).
class MpiComm final : public Communicator {
 public:
  MpiComm() : comm_(MPI_COMM_WORLD) {
    int provided = 0;
    // Collectives come from whichever thread runs the engine, never two at once.
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    std::atexit([] {
      int finalized = 0;
      MPI_Finalized(&finalized);
      if (!finalized) MPI_Finalize();
    });
  }
  explicit MpiComm(MPI_Comm part) : comm_(part) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    MPI_Comm part = MPI_COMM_NULL;
    MPI_Comm_split(comm_, color, key, &part);
    return std::make_unique<MpiComm>(part);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* x, int64_t n) override {
    const double start = MPI_Wtime();
    const int count = count_of(n, "sum");
    gathered_.resize(static_cast<size_t>(n) * static_cast<size_t>(size_));
    MPI_Request request;
    MPI_Iallgather(x, count, MPI_FLOAT, gathered_.data(), count, MPI_FLOAT, comm_, &request);
    finish(request, "all-reduce");
    for (int64_t i = 0; i < n; ++i) {
      float sum = gathered_[static_cast<size_t>(i)];
      for (int r = 1; r < size_; ++r) sum += gathered_[static_cast<size_t>(r * n + i)];
      x[i] = sum;
    }
    ++stats_.all_reduces;
    stats_.bytes += 4.0 * static_cast<double>(n);
    stats_.seconds += MPI_Wtime() - start;
  }
  void all_gather(const void* mine, int64_t bytes, void* all) override {
    const int count = count_of(bytes, "gather");
    MPI_Request request;
    MPI_Iallgather(mine, count, MPI_BYTE, all, count, MPI_BYTE, comm_, &request);
    finish(request, "all-gather");
  }
  void send(const float* x, int64_t n, int to) override {
    MPI_Request request;
    MPI_Isend(x, count_of(n, "send"), MPI_FLOAT, to, kHiddenTag, comm_, &request);
    finish(request, "hand-off to the next stage");
  }
  void receive(float* x, int64_t n, int from) override {
    MPI_Request request;
    MPI_Irecv(x, count_of(n, "receive"), MPI_FLOAT, from, kHiddenTag, comm_, &request);
    finish(request, "hand-off from the previous stage");
  }
  int64_t start_send(const void* x, int64_t bytes, int to, int tag) override {
    MPI_Request request;
    MPI_Isend(x, count_of(bytes, "send"), MPI_BYTE, to, tag, comm_, &request);
    return keep(request);
  }
  int64_t start_receive(void* x, int64_t bytes, int from, int tag) override {
    MPI_Request request;
    MPI_Irecv(x, count_of(bytes, "receive"), MPI_BYTE, from, tag, comm_, &request);
    return keep(request);
  }
  void finish_transfer(int64_t id, const char* what, bool idle) override {
    const auto it = transfers_.find(id);
    if (it == transfers_.end()) return;
    if (idle) {
      wait_idle(it->second);
    } else {
      finish(it->second, what);
    }
    transfers_.erase(it);
  }
  bool transfer_done(int64_t id) override {
    const auto it = transfers_.find(id);
    if (it == transfers_.end()) return true;
    int done = 0;
    MPI_Test(&it->second, &done, MPI_STATUS_IGNORE);
    if (done) transfers_.erase(it);
    return done != 0;
  }
  void broadcast(float* x, int64_t n, int root) override {
    MPI_Request request;
    MPI_Ibcast(x, count_of(n, "broadcast"), MPI_FLOAT, root, comm_, &request);
    finish(request, "logits' broadcast");
  }
  void broadcast_bytes(void* x, int64_t bytes, int root, bool idle) override {
    MPI_Request request;
    MPI_Ibcast(x, count_of(bytes, "broadcast"), MPI_BYTE, root, comm_, &request);
    if (!idle) {
      finish(request, "step's broadcast");
      return;
    }
    wait_idle(request);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::exit(code);
  }

 private:
  int64_t keep(MPI_Request request) {
    transfers_.emplace(++last_transfer_, request);
    return last_transfer_;
  }
  // Waits without a deadline and without holding a core: spins for the first millisecond (the
  // next step of a busy server), then polls every 500 us.
  static void wait_idle(MPI_Request& request) {
    const double spin_until = MPI_Wtime() + 1e-3;
    for (;;) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (MPI_Wtime() < spin_until) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(500));
      }
    }
  }
  // Waits for `request`, at most the rank timeout: past it the ranks are not all alive and
  // stepping (one stopped, hung or died without an error), and the job ends on every rank.
  void finish(MPI_Request& request, const char* what) {
    if (rank_timeout_seconds() <= 0) {
      MPI_Wait(&request, MPI_STATUS_IGNORE);
      return;
    }
    const double deadline = MPI_Wtime() + rank_timeout_seconds();
    for (;;) {
      int done = 0;
      MPI_Test(&request, &done, MPI_STATUS_IGNORE);
      if (done) return;
      if (MPI_Wtime() > deadline) {
        int world_rank = 0;
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        std::fprintf(stderr,
                     "error: rank %d: the other ranks did not reach the %s within %.0f s (one "
                     "stopped, hung or died); ending the job\n",
                     world_rank, what, rank_timeout_seconds());
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      std::this_thread::yield();
    }
  }

  MPI_Comm comm_;
  int rank_ = 0, size_ = 1;
  std::vector<float> gathered_;
  std::unordered_map<int64_t, MPI_Request> transfers_;  // started, not yet finished
  int64_t last_transfer_ = 0;
};
#endif

double& rank_timeout() {
  static double seconds = 0.0;  // none until the ranks step together
  return seconds;
}

#ifdef EMBER_MPI
double rank_timeout_seconds() {
  return rank_timeout();
}
#endif

std::unique_ptr<Communicator>& world_slot() {
  static std::unique_ptr<Communicator> slot;
  return slot;
}

}  // namespace

void set_rank_timeout(double seconds) {
  rank_timeout() = seconds;
}

bool built_with_mpi() {
#ifdef EMBER_MPI
  return true;
#else
  return false;
#endif
}

bool launched_by_mpi() {
  for (const char* var : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"}) {
    if (std::getenv(var) != nullptr) return true;
  }
  return false;
}

int local_rank() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"}) {
    if (const char* v = std::getenv(var); v != nullptr) {
      char* end = nullptr;
      const long r = std::strtol(v, &end, 10);
      if (end != v && *end == '\0' && r >= 0 && r < INT_MAX) return static_cast<int>(r);
    }
  }
  return 0;
}

Communicator& world() {
  std::unique_ptr<Communicator>& slot = world_slot();
  if (!slot) {
#ifdef EMBER_MPI
    if (launched_by_mpi()) slot = std::make_unique<MpiComm>();
#endif
    if (!slot) slot = std::make_unique<SingleProcess>();
  }
  return *slot;
}

bool world_is_shared() {
  return world_slot() && world_slot()->size() > 1;
}

bool is_first_rank() {
  return !world_slot() || world_slot()->rank() == 0;
}

uint64_t shared_random_seed() {
  const uint64_t mine = std::random_device{}();
  if (!world_is_shared()) return mine;
  std::vector<uint64_t> all(static_cast<size_t>(world().size()));
  world().all_gather(&mine, sizeof mine, all.data());
  return all[0];
}

}  // namespace ember::parallel
