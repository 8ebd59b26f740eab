// A dedicated thread that runs one batch at a time for a backend whose work is synchronous
// host code (CpuBackend), so the dispatch loop's thread stays free to drain rings and plan
// the next batch meanwhile. The same thread runs every batch, so per-thread state (OpenMP's
// team, oneDNN's scratch) is built once.
//
// Thread safety: Start/Ready/Wait from one thread (the dispatch loop); the work and the
// notifier run on the execution thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <optional>
#include <thread>

#include "common/mutex.h"
#include "common/result.h"
#include "worker/backend.h"

namespace ferry {

class ExecutionThread {
 public:
  ExecutionThread();
  ~ExecutionThread();  // Waits for the batch in flight, then joins.
  ExecutionThread(const ExecutionThread&) = delete;
  ExecutionThread& operator=(const ExecutionThread&) = delete;

  // Runs `work` on the thread, then `notify` (if set). REQUIRES: nothing in flight.
  void Start(std::function<Result<ExecutionTiming>()> work, std::function<void()> notify)
      EXCLUDES(mu_);
  bool Ready() const { return ready_.load(std::memory_order_acquire); }
  // Waits for the batch started last and returns its result. REQUIRES: one was started.
  Result<ExecutionTiming> Wait() EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);

  Mutex mu_;
  std::condition_variable_any cv_;
  std::function<Result<ExecutionTiming>()> work_ GUARDED_BY(mu_);
  std::function<void()> notify_ GUARDED_BY(mu_);
  std::optional<Result<ExecutionTiming>> result_ GUARDED_BY(mu_);
  std::atomic<bool> ready_{false};  // Set (release) once result_ holds the batch's result.
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ferry
