#include "ember/core/thread_pool.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define EMBER_CPU_RELAX() _mm_pause()
#else
#define EMBER_CPU_RELAX() std::this_thread::yield()
#endif

namespace ember {

namespace {

// How long an idle thread spins before sleeping: long enough to bridge the gaps between the
// kernels of one forward step, short enough not to burn a core between requests.
constexpr auto kSpin = std::chrono::microseconds(100);

// Guided chunks: each grab takes 1 / (kGuidedDivisor * threads) of the units still left (at least
// one), so a job starts with big chunks (few grabs of the shared counter) and ends with single
// units: a thread that starts late or runs slower (a noisy neighbour, a core busy with the OS)
// holds the others at the end by at most one unit. With fixed chunks (4 per thread), B = 32 decode
// spent ~5% of its time waiting at region ends, most of it on the 576-row projections (12 units of
// 48 rows in 8 chunks of 1 or 2).
constexpr int64_t kGuidedDivisor = 2;

// Spins until pred() holds or kSpin has passed; returns pred().
template <typename Pred>
bool spin_until(Pred pred) {
  auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (int i = 0;; ++i) {
    if (pred()) return true;
    EMBER_CPU_RELAX();
    if ((i & 63) == 63 && std::chrono::steady_clock::now() > deadline) return pred();
  }
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(n_threads > 0 ? n_threads : default_thread_count()) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, const RangeFn& fn, int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  int parts = static_cast<int>(std::min<int64_t>(n_threads_, (n + grain - 1) / grain));
  if (parts <= 1) {
    fn(0, n, 0);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  job_units_ = (n + grain - 1) / grain;
  next_unit_.store(0, std::memory_order_relaxed);
  pending_.store(n_threads_ - 1, std::memory_order_relaxed);
  {
    // Under the mutex so a worker about to sleep cannot miss the bump.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  run_chunks(0);
  if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return pending_.load(std::memory_order_acquire) == 0; });
  }
  job_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    auto has_job = [&] {
      return stopping_.load(std::memory_order_relaxed) ||
             generation_.load(std::memory_order_acquire) != seen;
    };
    if (!spin_until(has_job)) {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, has_job);
    }
    if (stopping_.load()) return;
    seen = generation_.load(std::memory_order_acquire);
    run_chunks(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);
      done_.notify_one();
    }
  }
}

void ThreadPool::run_chunks(int thread_index) {
  const int64_t divisor = kGuidedDivisor * n_threads_;
  int64_t unit = next_unit_.load(std::memory_order_relaxed);
  for (;;) {
    if (unit >= job_units_) return;
    const int64_t take = std::max<int64_t>(1, (job_units_ - unit) / divisor);
    if (!next_unit_.compare_exchange_weak(unit, unit + take, std::memory_order_relaxed)) continue;
    const int64_t begin = unit * job_grain_;
    const int64_t end = std::min(job_n_, (unit + take) * job_grain_);
    (*job_)(begin, end, thread_index);
    unit = next_unit_.load(std::memory_order_relaxed);
  }
}

int ThreadPool::default_thread_count() {
  // Count distinct (package, core) pairs: SMT siblings share a core and gain little on
  // bandwidth-bound kernels.
  std::set<std::pair<std::string, std::string>> cores;
  unsigned logical = std::max(1u, std::thread::hardware_concurrency());
  for (unsigned cpu = 0; cpu < logical; ++cpu) {
    std::string base = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
    std::ifstream core_file(base + "core_id"), package_file(base + "physical_package_id");
    std::string core, package;
    if (!(core_file >> core) || !(package_file >> package)) return static_cast<int>(logical);
    cores.emplace(package, core);
  }
  return std::max<int>(1, static_cast<int>(cores.size()));
}

}  // namespace ember
