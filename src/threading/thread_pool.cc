#include "threading/thread_pool.h"

#include <algorithm>
#include <exception>

#include "base/error.h"

#if defined(__x86_64__)
#include <immintrin.h>
#define SPECD_PAUSE() _mm_pause()
#else
#define SPECD_PAUSE() std::this_thread::yield()
#endif

namespace specd {
namespace {
constexpr int kSpinIterations = 20000;
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(n_threads) {
  SPECD_CHECK(n_threads >= 1 && n_threads <= 256, "thread count must be in 1..256, got ",
              n_threads);
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { WorkerLoop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  while (true) {
    int spins = 0;
    while (generation_.load(std::memory_order_acquire) == seen) {
      if (++spins < kSpinIterations) {
        if (spins < kSpinIterations / 10) {
          SPECD_PAUSE();
        } else {
          std::this_thread::yield();
        }
        continue;
      }
      std::unique_lock<std::mutex> lock(mutex_);
      sleepers_.fetch_add(1);
      wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
      sleepers_.fetch_sub(1);
      break;
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*task_)(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::RunOnAll(const std::function<void(int)>& fn) {
  if (n_threads_ == 1) {
    fn(0);
    return;
  }
  std::exception_ptr error;
  std::mutex error_mutex;
  // Exceptions must not escape a worker thread; the first one is rethrown on the caller.
  const std::function<void(int)> guarded = [&](int i) {
    try {
      fn(i);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
    }
  };
  task_ = &guarded;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_acq_rel);
  }
  if (sleepers_.load() > 0) wake_.notify_all();
  guarded(0);
  // Spin briefly, then yield: when the machine is oversubscribed a worker may be descheduled,
  // and a pure spin would burn the time slice it needs.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < kSpinIterations / 10) {
      SPECD_PAUSE();
    } else {
      std::this_thread::yield();
    }
  }
  task_ = nullptr;
  if (error) std::rethrow_exception(error);
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn,
                             int64_t min_items_per_thread) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t n_chunks = (n + grain - 1) / grain;
  const int64_t by_work = std::max<int64_t>(1, n / std::max<int64_t>(min_items_per_thread, 1));
  const int n_used = static_cast<int>(std::min<int64_t>({n_threads_, n_chunks, by_work}));
  if (n_used == 1) {
    fn(0, n);
    return;
  }
  RunOnAll([&](int t) {
    if (t >= n_used) return;
    const int64_t chunk_begin = n_chunks * t / n_used;
    const int64_t chunk_end = n_chunks * (t + 1) / n_used;
    const int64_t begin = chunk_begin * grain;
    const int64_t end = std::min(n, chunk_end * grain);
    if (begin < end) fn(begin, end);
  });
}

}  // namespace specd
