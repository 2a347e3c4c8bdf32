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

// An owner takes 1 / kOwnDivisor of what is left of its range per grab (at least one unit), so a
// thread that stalls mid-piece strands at most an eighth of a 2-thread job; a thief takes half of
// the victim's remainder, from the back, so the victim's stream goes on undisturbed.
constexpr uint64_t kOwnDivisor = 4;

constexpr uint64_t pack(uint64_t begin, uint64_t end) {
  return begin << 32 | end;
}

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
    : n_threads_(n_threads > 0 ? n_threads : default_thread_count()),
      ranges_(std::make_unique<UnitRange[]>(static_cast<size_t>(n_threads_))) {
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
  // Units are counted in 32 bits (ranges_): a job of more than 2^31 units takes bigger grains.
  constexpr int64_t kMaxUnits = int64_t{1} << 31;
  if ((n + grain - 1) / grain > kMaxUnits) grain = (n + kMaxUnits - 1) / kMaxUnits;
  job_ = &fn;
  job_n_ = n;
  job_grain_ = grain;
  job_units_ = (n + grain - 1) / grain;
  for (int i = 0; i < n_threads_; ++i) {
    const auto begin = static_cast<uint64_t>(job_units_ * i / n_threads_);
    const auto end = static_cast<uint64_t>(job_units_ * (i + 1) / n_threads_);
    ranges_[static_cast<size_t>(i)].packed.store(pack(begin, end), std::memory_order_relaxed);
  }
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

void ThreadPool::run_units(int64_t unit_begin, int64_t unit_end, int thread_index) const {
  const int64_t begin = unit_begin * job_grain_;
  const int64_t end = std::min(job_n_, unit_end * job_grain_);
  (*job_)(begin, end, thread_index);
}

void ThreadPool::run_chunks(int thread_index) {
  // Own range, from the front.
  std::atomic<uint64_t>& own = ranges_[static_cast<size_t>(thread_index)].packed;
  uint64_t v = own.load(std::memory_order_relaxed);
  for (;;) {
    const uint64_t begin = v >> 32, end = v & 0xffffffffu;
    if (begin >= end) break;
    const uint64_t take = std::max<uint64_t>(1, (end - begin) / kOwnDivisor);
    if (!own.compare_exchange_weak(v, pack(begin + take, end), std::memory_order_relaxed)) continue;
    run_units(static_cast<int64_t>(begin), static_cast<int64_t>(begin + take), thread_index);
    v = own.load(std::memory_order_relaxed);
  }
  // Then the others', from the back. Ranges only shrink, so once each is seen empty the job has
  // no units left to hand out.
  for (int k = 1; k < n_threads_; ++k) {
    std::atomic<uint64_t>& other =
        ranges_[static_cast<size_t>((thread_index + k) % n_threads_)].packed;
    uint64_t w = other.load(std::memory_order_relaxed);
    for (;;) {
      const uint64_t begin = w >> 32, end = w & 0xffffffffu;
      if (begin >= end) break;
      const uint64_t take = std::max<uint64_t>(1, (end - begin) / 2);
      if (!other.compare_exchange_weak(w, pack(begin, end - take), std::memory_order_relaxed)) {
        continue;
      }
      run_units(static_cast<int64_t>(end - take), static_cast<int64_t>(end), thread_index);
      w = other.load(std::memory_order_relaxed);
    }
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
