// A fixed pool of threads for data-parallel loops in the CPU executor.
//
// Thread safety: ParallelFor may be called from one thread at a time (the dispatch loop).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "common/mutex.h"

namespace ferry {

class ThreadPool {
 public:
  // threads = 0: one per hardware thread.
  explicit ThreadPool(unsigned threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  // Calls fn(begin, end) over [0, n) split into contiguous chunks, on the pool and the
  // calling thread; returns when all are done. Runs inline when n < min_chunk * 2.
  void ParallelFor(int64_t n, int64_t min_chunk, const std::function<void(int64_t, int64_t)>& fn);
  unsigned size() const { return static_cast<unsigned>(workers_.size()) + 1; }

 private:
  void Run(unsigned index);

  std::vector<std::thread> workers_;
  Mutex mu_;
  std::condition_variable_any wake_;
  std::condition_variable_any done_;
  const std::function<void(int64_t, int64_t)>* task_ GUARDED_BY(mu_) = nullptr;
  int64_t n_ GUARDED_BY(mu_) = 0;
  int64_t chunks_ GUARDED_BY(mu_) = 0;
  int64_t next_chunk_ GUARDED_BY(mu_) = 0;
  int64_t finished_ GUARDED_BY(mu_) = 0;
  uint64_t epoch_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
};

}  // namespace ferry
