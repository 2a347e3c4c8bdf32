// A persistent pool of worker threads for data-parallel kernels: parallel_for splits [0, n) into
// one contiguous range per thread (the calling one included). Each thread works through its own
// range front to back in pieces that shrink to one grain as it drains, then steals half of what is
// left at the back of another thread's range, until nothing is left: a slow or late thread does not
// hold up the others, and each thread reads its part of a weight matrix as one address-ordered
// stream (what the hardware prefetchers follow best; a shared counter handing out guided chunks
// scattered each thread's reads over ~10 chunk starts per matrix).
// Threads are created once; between jobs a worker spins briefly on an atomic before sleeping, so
// the ~150 parallel regions of one decode step cost a cache-line ping, not a futex wake-up each.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace ember {

class ThreadPool {
 public:
  // n_threads <= 0 picks default_thread_count().
  explicit ThreadPool(int n_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(begin, end, thread_index) for every non-empty chunk of [0, n). Chunk boundaries are
  // multiples of `grain` (except the last), so callers can keep SIMD tiles whole. Which thread runs
  // which chunk varies from call to call. Blocks until all chunks are done. Not re-entrant: do not
  // call parallel_for from inside fn.
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread_index)>;
  void parallel_for(int64_t n, const RangeFn& fn, int64_t grain = 1);

  // Physical cores of this machine (logical CPUs / SMT siblings), at least 1.
  static int default_thread_count();

 private:
  void worker_loop(int index);
  void run_chunks(int thread_index);  // takes chunks of the current job until none are left
  void run_units(int64_t unit_begin, int64_t unit_end, int thread_index) const;

  int n_threads_;
  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  std::atomic<uint64_t> generation_{0};  // bumped (under mutex_) to publish a job
  std::atomic<int> pending_{0};          // workers still running the current job
  std::atomic<bool> stopping_{false};
  // The current job; written before generation_ is bumped, read after it is seen.
  const RangeFn* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_grain_ = 1;
  int64_t job_units_ = 0;  // ceil(job_n_ / job_grain_)
  // Per thread, the units [begin, end) of its range not yet taken, packed as begin << 32 | end
  // (one CAS moves either end); one cache line each, so an owner's grabs stay core-local.
  struct alignas(64) UnitRange {
    std::atomic<uint64_t> packed{0};
  };
  std::unique_ptr<UnitRange[]> ranges_;
};

}  // namespace ember
