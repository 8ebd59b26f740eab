#include "shm/futex.h"

#include <errno.h>
#include <linux/futex.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#ifndef SYS_futex_waitv
#define SYS_futex_waitv 449  // Same number on every architecture (the generic table).
#endif

namespace ferry::shm {

static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

namespace {

std::atomic<bool> waitv_missing{false};

constexpr int64_t kFallbackSleepNs = 50'000;

}  // namespace

void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns) {
  struct timespec timeout {};
  struct timespec* timeout_ptr = nullptr;
  if (timeout_ns >= 0) {
    timeout.tv_sec = timeout_ns / 1'000'000'000;
    timeout.tv_nsec = timeout_ns % 1'000'000'000;
    timeout_ptr = &timeout;
  }
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAIT, expected, timeout_ptr, nullptr,
          0);
}

void FutexWaitAny(std::span<const FutexWaiter> words, int64_t timeout_ns) {
  if (!waitv_missing.load(std::memory_order_relaxed)) {
    struct futex_waitv waiters[FUTEX_WAITV_MAX] = {};
    size_t n = words.size() < FUTEX_WAITV_MAX ? words.size() : FUTEX_WAITV_MAX;
    for (size_t i = 0; i < n; ++i) {
      waiters[i].val = words[i].expected;
      waiters[i].uaddr = reinterpret_cast<uintptr_t>(words[i].word);
      waiters[i].flags = FUTEX_32;  // Shared (not FUTEX_PRIVATE_FLAG): across processes.
    }
    struct timespec deadline {};
    struct timespec* deadline_ptr = nullptr;
    if (timeout_ns >= 0) {
      // futex_waitv takes an absolute time on the given clock.
      clock_gettime(CLOCK_MONOTONIC, &deadline);
      int64_t ns = deadline.tv_nsec + timeout_ns % 1'000'000'000;
      deadline.tv_sec += timeout_ns / 1'000'000'000 + ns / 1'000'000'000;
      deadline.tv_nsec = ns % 1'000'000'000;
      deadline_ptr = &deadline;
    }
    long rc = syscall(SYS_futex_waitv, waiters, static_cast<unsigned>(n), 0u, deadline_ptr,
                      CLOCK_MONOTONIC);
    if (rc >= 0 || errno != ENOSYS) {
      return;
    }
    waitv_missing.store(true, std::memory_order_relaxed);
  }
  int64_t ns = timeout_ns >= 0 && timeout_ns < kFallbackSleepNs ? timeout_ns : kFallbackSleepNs;
  struct timespec pause {
    0, static_cast<long>(ns)
  };
  nanosleep(&pause, nullptr);
}

void FutexWake(std::atomic<uint32_t>* word, int count) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
}

}  // namespace ferry::shm
