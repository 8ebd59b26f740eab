#include "worker/backends/execution_thread.h"

#include "common/clock.h"
#include "common/thread_name.h"

namespace ferry {

ExecutionThread::ExecutionThread()
    : thread_([this] {
        NameThisThread("ferry-execute");
        Run();
      }) {}

ExecutionThread::~ExecutionThread() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void ExecutionThread::Start(std::function<Result<ExecutionTiming>()> work,
                            std::function<void()> notify) {
  {
    MutexLock lock(&mu_);
    queue_.push_back({std::move(work), std::move(notify)});
  }
  cv_.notify_all();
}

Result<ExecutionTiming> ExecutionThread::Wait() {
  MutexLock lock(&mu_);
  while (results_.empty()) {
    cv_.wait(mu_);
  }
  Result<ExecutionTiming> result = std::move(results_.front());
  results_.pop_front();
  finished_.fetch_sub(1, std::memory_order_relaxed);
  return result;
}

void ExecutionThread::Run() {
  MutexLock lock(&mu_);
  for (;;) {
    while (!stopping_ && queue_.empty()) {
      cv_.wait(mu_);
    }
    if (queue_.empty()) {
      return;  // Stopping with nothing queued.
    }
    Work work = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    int64_t started = MonotonicNs();
    Result<ExecutionTiming> result = work.run();
    if (result.ok()) {
      result->started_ns = started;
      result->finished_ns = MonotonicNs();
    }
    lock.Lock();
    results_.push_back(std::move(result));
    finished_.fetch_add(1, std::memory_order_release);
    cv_.notify_all();
    // With another batch queued the caller is not needed to keep the executor busy, and a
    // wake-up costs this thread a system call (tens of microseconds on a VM) before the next
    // batch: notify only when the queue ran empty.
    if (work.notify && queue_.empty()) {
      lock.Unlock();
      work.notify();
      lock.Lock();
    }
  }
}

}  // namespace ferry
