// Cross-process futex wait and wake on a 32-bit word in shared memory (non-private ops, so
// the word may sit at different addresses in different processes).
//
// Thread safety: safe for concurrent use.
#pragma once

#include <atomic>
#include <cstdint>

namespace ferry::shm {

// Sleeps while *word == expected, for at most timeout_ns (<0: no timeout). Returns when woken,
// when the value differs, on timeout, or on a signal; callers re-check their condition.
void FutexWait(std::atomic<uint32_t>* word, uint32_t expected, int64_t timeout_ns);
// Wakes up to `count` sleepers on word.
void FutexWake(std::atomic<uint32_t>* word, int count);

}  // namespace ferry::shm
