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
