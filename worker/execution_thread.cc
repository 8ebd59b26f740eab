#include "worker/execution_thread.h"

#include "common/clock.h"

namespace ferry {

ExecutionThread::ExecutionThread() : thread_([this] { Run(); }) {}

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
    ready_.store(false, std::memory_order_relaxed);
    result_.reset();
    work_ = std::move(work);
    notify_ = std::move(notify);
  }
  cv_.notify_all();
}

Result<ExecutionTiming> ExecutionThread::Wait() {
  // Short batches finish within a few microseconds of being asked about: spin first.
  for (int i = 0; i < 4000 && !Ready(); ++i) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
  }
  MutexLock lock(&mu_);
  while (!Ready()) {
    cv_.wait(mu_);
  }
  Result<ExecutionTiming> result = std::move(*result_);
  result_.reset();
  return result;
}

void ExecutionThread::Run() {
  MutexLock lock(&mu_);
  for (;;) {
    while (!stopping_ && work_ == nullptr) {
      cv_.wait(mu_);
    }
    if (work_ == nullptr) {
      return;  // Stopping with nothing in flight.
    }
    std::function<Result<ExecutionTiming>()> work = std::move(work_);
    work_ = nullptr;
    std::function<void()> notify = notify_;
    lock.Unlock();
    Result<ExecutionTiming> result = work();
    if (result.ok()) {
      result->finished_ns = MonotonicNs();
    }
    lock.Lock();
    result_ = std::move(result);
    ready_.store(true, std::memory_order_release);
    cv_.notify_all();
    if (notify) {
      lock.Unlock();
      notify();
      lock.Lock();
    }
  }
}

}  // namespace ferry
