#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <numeric>
#include <vector>

#include "ember/core/thread_pool.h"

namespace ember {
namespace {

TEST(ThreadPool, EveryIndexRunsExactlyOnceAcrossManyJobs) {
  ThreadPool pool(3);
  for (int64_t n : {1, 2, 3, 7, 64, 1000}) {
    for (int64_t grain : {1, 4, 16}) {
      for (int rep = 0; rep < 50; ++rep) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        pool.parallel_for(
            n,
            [&](int64_t b, int64_t e, int) {
              EXPECT_TRUE(b % grain == 0) << "chunks start on grain boundaries";
              for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
            },
            grain);
        for (auto& h : hits) ASSERT_EQ(h.load(), 1) << "n " << n << " grain " << grain;
      }
    }
  }
}

TEST(ThreadPool, ChunksShrinkToOneGrainAsTheJobDrains) {
  // Guided chunks: each takes 1 / (2 * threads) of what is left, so none exceeds a quarter of the
  // job with 2 threads and the last ones are single grains (a slow thread holds the others back by
  // at most one grain at the end).
  ThreadPool pool(2);
  for (int64_t grain : {1, 24}) {
    const int64_t n = 1000 * grain;
    std::mutex mutex;
    std::vector<int64_t> sizes;
    pool.parallel_for(
        n,
        [&](int64_t b, int64_t e, int) {
          std::lock_guard<std::mutex> lock(mutex);
          sizes.push_back(e - b);
        },
        grain);
    EXPECT_EQ(std::accumulate(sizes.begin(), sizes.end(), int64_t{0}), n);
    EXPECT_LE(*std::max_element(sizes.begin(), sizes.end()), n / 4);
    EXPECT_EQ(*std::min_element(sizes.begin(), sizes.end()), grain);
    EXPECT_LT(sizes.size(), 40u) << "few grabs of the shared counter";
  }
}

TEST(ThreadPool, WorkersSleepAndWakeBetweenJobs) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int rep = 0; rep < 5; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));  // past the spin window
    pool.parallel_for(100, [&](int64_t b, int64_t e, int) { total += e - b; });
  }
  EXPECT_EQ(total.load(), 500);
}

TEST(ThreadPool, DefaultThreadCountIsPositive) {
  EXPECT_GE(ThreadPool::default_thread_count(), 1);
}

}  // namespace
}  // namespace ember
