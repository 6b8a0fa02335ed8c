#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "base/error.h"
#include "threading/thread_pool.h"

namespace specd {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      for (int rep = 0; rep < 50; ++rep) {
        pool.ParallelFor(n, 16, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[i]++;
        });
      }
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 50);
    }
  }
}

TEST(ThreadPool, ParallelForUsesOnlyAsManyThreadsAsTheWorkFills) {
  ThreadPool pool(3);
  auto ranges_for = [&](int64_t n, int64_t min_items_per_thread) {
    std::atomic<int> ranges{0};
    std::atomic<int64_t> covered{0};
    pool.ParallelFor(
        n, 1,
        [&](int64_t b, int64_t e) {
          ranges++;
          covered += e - b;
        },
        min_items_per_thread);
    EXPECT_EQ(covered.load(), n);
    return ranges.load();
  };
  EXPECT_EQ(ranges_for(100, 1), 3);
  EXPECT_EQ(ranges_for(100, 40), 2);   // 100 / 40: two threads of 50
  EXPECT_EQ(ranges_for(100, 100), 1);  // the caller alone
  EXPECT_EQ(ranges_for(100, 1000), 1);
  EXPECT_EQ(ranges_for(100, 0), 3);  // no minimum
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.RunOnAll([](int t) {
    if (t == 1) Fail("worker failed");
  }),
               Error);
  int count = 0;
  pool.RunOnAll([&](int t) {
    if (t == 0) ++count;
  });
  EXPECT_EQ(count, 1);  // still usable
  EXPECT_THROW(ThreadPool(0), Error);
}

}  // namespace
}  // namespace specd
