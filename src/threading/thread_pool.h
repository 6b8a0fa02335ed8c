// A persistent pool of worker threads, created once and passed explicitly to whatever computes.
// A forward pass runs a few hundred short parallel regions per token, so workers spin briefly on
// an atomic generation counter before sleeping; waking a sleeping thread costs ~10 us.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace specd {

class ThreadPool {
 public:
  // n_threads counts the calling thread: a pool of 2 has one worker.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }

  // Calls fn(thread_index) once on each of the pool's threads and returns when all are done.
  void RunOnAll(const std::function<void(int)>& fn);

  // Splits [0, n) into contiguous ranges, one per thread, aligned to `grain`; calls
  // fn(begin, end) for each non-empty range. Uses fewer threads (down to the caller alone) when a
  // thread would get fewer than `min_items_per_thread` items, so tiny work is not handed over.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn,
                   int64_t min_items_per_thread = 1);

 private:
  void WorkerLoop(int index);

  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int)>* task_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  std::atomic<int> sleepers_{0};
};

}  // namespace specd
