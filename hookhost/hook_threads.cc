// The hook-thread pool, and the watchdog over its plugin calls.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "common/clock.h"
#include "common/thread_name.h"
#include "hookhost/hookhost_impl.h"
#include "hookhost/request_checks.h"
#include "shm/recovery.h"

namespace ferry::hookhost {

namespace {}  // namespace

thread_local CallSlot* HookHost::Impl::t_call = nullptr;

// --- Hook threads ---
void HookHost::Impl::StartThread() {
  MutexLock lock(&calls_mutex);
  CallSlot* call = &calls.emplace_back();
  call->thread = std::thread([this, call] {
    NameThisThread("ferry-hook");
    PoolLoop(call);
  });
}

void HookHost::Impl::PoolLoop(CallSlot* call) {
  t_call = call;
  while (true) {
    std::function<void()> task;
    {
      MutexLock lock(&pool_mutex);
      // Stopping drains the queue first: every task answers its request.
      pool_cv.wait(pool_mutex,
                   [&]() REQUIRES(pool_mutex) { return stopping.load() || !tasks.empty(); });
      if (tasks.empty()) {
        return;
      }
      task = std::move(tasks.front());
      tasks.pop_front();
    }
    task();
    if (call->written_off.load()) {
      stuck.fetch_sub(1, std::memory_order_relaxed);  // It came back; its stand-in runs on.
      return;
    }
  }
}

void HookHost::Impl::CheckCallTimeouts(int64_t now) {
  int64_t limit = options.call_timeout_ms * 1'000'000;
  std::vector<std::pair<PendingPtr, std::string>> overran;
  {
    MutexLock lock(&calls_mutex);
    for (CallSlot& call : calls) {
      int64_t started = call.started_ns.load(std::memory_order_acquire);
      if (started == 0 || now - started <= limit || call.written_off.load()) {
        continue;
      }
      call.written_off.store(true);
      call.thread.detach();  // A running call cannot be stopped: the host drains and exits.
      faulted_model.store(static_cast<int>(call.pending->model->index), std::memory_order_relaxed);
      stuck.fetch_add(1, std::memory_order_relaxed);
      timed_out.fetch_add(1, std::memory_order_relaxed);
      overran.emplace_back(call.pending, call.what);
    }
  }
  for (auto& [p, what] : overran) {
    StartThread();  // A stand-in, so the pool keeps its size.
    if (p->model->pipeline() && !p->subcall) {
      ReleaseRun(p);  // Its run slot goes to the next run.
    }
    spdlog::error("hook host slot {}: model '{}': plugin {} ran past call_timeout_ms ({} ms)", slot,
                  p->model->name, what, options.call_timeout_ms);
    Post([this, p = p, what = what] {
      Answer(p, DeadlineExceeded("model '" + p->model->name + "': plugin " + what +
                                 " ran past call_timeout_ms (" +
                                 std::to_string(options.call_timeout_ms) + " ms)"));
    });
  }
}

}  // namespace ferry::hookhost
