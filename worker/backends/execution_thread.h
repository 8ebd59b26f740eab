// A dedicated thread that runs batches one at a time, in the order started, for a backend
// whose work is synchronous host code (CpuBackend), so the dispatch loop's thread stays free
// to drain rings and plan meanwhile. Up to kDepth batches may be started: the next one begins
// the moment the current one ends, with no wake-up of the loop in between. The same thread
// runs every batch, so per-thread state (OpenMP's team, oneDNN's scratch) is built once.
//
// Thread safety: Start/Ready/Wait from one thread (the dispatch loop); the work and the
// notifier run on the execution thread.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <thread>

#include "common/mutex.h"
#include "common/result.h"
#include "worker/backends/backend.h"

namespace ferry {

class ExecutionThread {
 public:
  ExecutionThread();
  ~ExecutionThread();  // Runs every batch queued, then joins.
  ExecutionThread(const ExecutionThread&) = delete;
  ExecutionThread& operator=(const ExecutionThread&) = delete;

  static constexpr int kDepth = 3;

  // Queues `work` to run on the thread, then `notify` (if set) when no other batch is queued
  // behind it (a caller with batches queued polls Ready()).
  // REQUIRES: fewer than kDepth batches started and not yet waited for.
  void Start(std::function<Result<ExecutionTiming>()> work, std::function<void()> notify)
      EXCLUDES(mu_);
  // True when the oldest batch not yet waited for has finished.
  bool Ready() const { return finished_.load(std::memory_order_acquire) > 0; }
  // Waits for the oldest batch not yet waited for and returns its result (its timing's
  // started_ns and finished_ns set). REQUIRES: one was started.
  Result<ExecutionTiming> Wait() EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);

  Mutex mu_;
  std::condition_variable_any cv_;
  struct Work {
    std::function<Result<ExecutionTiming>()> run;
    std::function<void()> notify;
  };
  std::deque<Work> queue_ GUARDED_BY(mu_);
  std::deque<Result<ExecutionTiming>> results_ GUARDED_BY(mu_);
  std::atomic<int> finished_{0};  // results_.size(), readable without the lock.
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

// A Backend whose batches run on an ExecutionThread, kDepth deep: Begin queues Execute there.
// CpuBackend and CudaBackend (whose Execute selects its device on the calling thread) use it.
class ThreadedBackend : public Backend {
 public:
  int MaxInFlight() const override { return ExecutionThread::kDepth; }
  Status Begin(ModelHandle model, const BatchJob& job) override {
    if (execution_ == nullptr) {
      execution_ = std::make_unique<ExecutionThread>();
    }
    execution_->Start([this, model, job = &job] { return Execute(model, *job); }, notify_);
    return OkStatus();
  }
  // On the caller's thread: no hand-off to the execution thread and no notification back.
  Status RunHere(ModelHandle model, const BatchJob& job) override {
    ran_here_ = ExecuteTimed(model, job);
    return OkStatus();
  }
  bool Ready() const override { return ran_here_.has_value() || execution_->Ready(); }
  Result<ExecutionTiming> Finish() override {
    if (ran_here_.has_value()) {
      Result<ExecutionTiming> result = std::move(*ran_here_);
      ran_here_.reset();
      return result;
    }
    return execution_->Wait();
  }

 protected:
  // Derived destructors call this first, so no batch runs on a half-destroyed backend.
  void StopExecution() { execution_.reset(); }

 private:
  std::unique_ptr<ExecutionThread> execution_;       // Started by the first Begin.
  std::optional<Result<ExecutionTiming>> ran_here_;  // RunHere's result, until Finish.
};

}  // namespace ferry
