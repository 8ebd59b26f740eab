// Cross-process futex wait and wake on 32-bit words in shared memory (non-private ops, so a
// word may sit at different addresses in different processes, and a waiter may map it
// read-only: waiting and waking only read the word).
//
// Thread safety: safe for concurrent use.
#pragma once

#include <atomic>
#include <cstdint>
#include <span>

namespace ferry::shm {

// Sleeps while *word == expected, for at most timeout_ns (<0: no timeout). Returns when woken,
// when the value differs, on timeout, or on a signal; callers re-check their condition.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns);

// One word of a FutexWaitAny.
struct FutexWaiter {
  const std::atomic<uint32_t>* word;
  uint32_t expected;
};

// Sleeps while every word still holds its expected value (futex_waitv, Linux 5.16+), for at
// most timeout_ns (<0: no timeout). Returns when any is woken or differs, on timeout or on a
// signal. Where futex_waitv is missing it sleeps min(timeout, 50 us) and returns (callers
// re-check, so this only costs latency). REQUIRES: at most 128 words.
void FutexWaitAny(std::span<const FutexWaiter> words, int64_t timeout_ns);

// Wakes up to `count` sleepers on word.
void FutexWake(std::atomic<uint32_t>* word, int count);

}  // namespace ferry::shm
