// The collectives tensor parallelism needs, across the processes `mpirun` started
// (MPI_COMM_WORLD, OpenMPI from Debian). Every rank calls the same collectives in the same order;
// a rank that fails ends them all (abort), so none is left waiting in a collective.
#pragma once

#include <cstdint>
#include <memory>

namespace ember::parallel {

// What the all-reduces of this process cost so far.
struct CommStats {
  int64_t all_reduces = 0;
  double bytes = 0;    // this rank's payload (n floats x 4 per call)
  double seconds = 0;  // wall time inside them, waiting for the other ranks included
  // Of all_reduces, those a GPU backend ran on the device (NCCL, Backend::all_reduce_sum): their
  // time is spent inside the GPU's step, not in `seconds`.
  int64_t on_device = 0;
};

// Tags of the point-to-point messages: one per kind, so each kind keeps its own order.
enum MessageTag : int { kHiddenTag = 0, kLogitsTag = 1, kStepTag = 2 };

class Communicator {
 public:
  virtual ~Communicator() = default;
  const CommStats& stats() const { return stats_; }
  // Counts an all-reduce of n floats that a backend ran on its device over these ranks.
  void count_device_all_reduce(int64_t n) {
    ++stats_.all_reduces;
    ++stats_.on_device;
    stats_.bytes += static_cast<double>(n) * sizeof(float);
  }
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // x (n floats) becomes the sum of every rank's x, added in rank order on every rank: the same
  // bits on all of them whatever order the transport would reduce in, so ranks that go on to
  // sample from identical logits stay in step.
  virtual void all_reduce_sum(float* x, int64_t n) = 0;
  // Every rank's `bytes` bytes of `mine`, rank after rank, into `all` (size() * bytes).
  virtual void all_gather(const void* mine, int64_t bytes, void* all) = 0;
  // n floats to rank `to` / from rank `from` (pipeline stages hand hidden states on).
  virtual void send(const float* x, int64_t n, int to) = 0;
  virtual void receive(float* x, int64_t n, int from) = 0;
  // Point-to-point transfers that return at once: `bytes` bytes of x to rank `to`, or from rank
  // `from` into x, under `tag` (messages from one rank to another with one tag arrive in the
  // order they were sent). x must stay as it is until finish_transfer(the returned id) returns.
  // Pipeline stages use them to run later steps while earlier ones are still on their way.
  virtual int64_t start_send(const void* x, int64_t bytes, int to, int tag) = 0;
  virtual int64_t start_receive(void* x, int64_t bytes, int from, int tag) = 0;
  // Waits for a started transfer (at most the rank timeout; `idle` as for broadcast_bytes).
  virtual void finish_transfer(int64_t id, const char* what, bool idle = false) = 0;
  // Whether a started transfer has completed (then it needs no finish_transfer).
  virtual bool transfer_done(int64_t id) = 0;
  // Rank `root`'s n floats into x on every rank.
  virtual void broadcast(float* x, int64_t n, int root) = 0;
  // Rank `root`'s `bytes` bytes into x on every rank. `idle`: a rank waiting for work that may
  // be long in coming (serve's followers between requests): no rank timeout, and after a short
  // spin it sleeps between polls instead of holding a core.
  virtual void broadcast_bytes(void* x, int64_t bytes, int root, bool idle) = 0;
  // Ends the processes of every rank with `code` (after an error on this one).
  [[noreturn]] virtual void abort(int code) = 0;
  // The ranks that give the same `color` as a communicator of their own, ranked by `key` (every
  // rank calls it).
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;

 protected:
  CommStats stats_;
};

// How long a rank waits in a collective or hand-off for the others (0, the default: no limit, as
// while the ranks load): past it the job ends on every rank with an error naming the wait, so a
// stopped or hung rank never leaves the others waiting forever. (A rank that dies makes mpirun end
// the job at once.)
void set_rank_timeout(double seconds);

// Whether this ember was built with MPI (-DEMBER_MPI=ON found OpenMPI).
bool built_with_mpi();
// Whether an MPI launcher (mpirun) started this process, as its environment says.
bool launched_by_mpi();
// This process's rank among the job's processes on its host, as the launcher's environment says
// (OpenMPI's OMPI_COMM_WORLD_LOCAL_RANK, MPICH's MPI_LOCALRANKID, Slurm's SLURM_LOCALID); 0 when
// none is set. Ranks on one host take one GPU each by it.
int local_rank();
// The processes of this job: MPI_COMM_WORLD when built with MPI and launched by mpirun, else a
// world of one process. Made (MPI initialised) on first use; MPI is finalised at exit.
Communicator& world();
// Whether world() has been made with more than one process (for the error path: abort them all).
bool world_is_shared();
// Whether this process is rank 0 (or alone): the one that writes output files.
bool is_first_rank();
// A random seed (std::random_device), rank 0's on every rank when the world is shared: ranks that
// sample must draw the same numbers.
uint64_t shared_random_seed();

}  // namespace ember::parallel
