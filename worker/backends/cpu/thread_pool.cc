#include "worker/backends/cpu/thread_pool.h"

#include <algorithm>

#include "common/thread_name.h"

namespace ferry {

ThreadPool::ThreadPool(unsigned threads) {
  if (threads == 0) {
    threads = std::max(1u, std::thread::hardware_concurrency());
  }
  for (unsigned i = 1; i < threads; ++i) {
    workers_.emplace_back([this, i] {
      NameThisThread("ferry-cpu-" + std::to_string(i));
      Run(i);
    });
  }
}

ThreadPool::~ThreadPool() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) {
    t.join();
  }
}

void ThreadPool::Run(unsigned /*index*/) {
  uint64_t seen = 0;
  MutexLock lock(&mu_);
  for (;;) {
    while (!stop_ && epoch_ == seen) {
      wake_.wait(mu_);
    }
    if (stop_) {
      return;
    }
    seen = epoch_;
    while (next_chunk_ < chunks_) {
      int64_t chunk = next_chunk_++;
      const auto* task = task_;
      int64_t begin = n_ * chunk / chunks_;
      int64_t end = n_ * (chunk + 1) / chunks_;
      lock.Unlock();
      (*task)(begin, end);
      lock.Lock();
      if (++finished_ == chunks_) {
        done_.notify_all();
      }
    }
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) {
    return;
  }
  int64_t chunks = std::min<int64_t>(size(), n / std::max<int64_t>(1, min_chunk));
  if (chunks < 2) {
    fn(0, n);
    return;
  }
  MutexLock lock(&mu_);
  task_ = &fn;
  n_ = n;
  chunks_ = chunks;
  next_chunk_ = 0;
  finished_ = 0;
  ++epoch_;
  wake_.notify_all();
  while (next_chunk_ < chunks_) {  // The caller works too.
    int64_t chunk = next_chunk_++;
    lock.Unlock();
    fn(n * chunk / chunks, n * (chunk + 1) / chunks);
    lock.Lock();
    ++finished_;
  }
  while (finished_ != chunks_) {
    done_.wait(mu_);
  }
  task_ = nullptr;
}

}  // namespace ferry
