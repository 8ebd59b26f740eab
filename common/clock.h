// The node's one clock: CLOCK_MONOTONIC in nanoseconds. Deadlines cross processes in this
// clock (every process on a host reads the same CLOCK_MONOTONIC), and std::chrono's
// steady_clock is the same clock on Linux.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <time.h>

#include <cstdint>

namespace ferry {

inline int64_t MonotonicNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t{ts.tv_sec} * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace ferry
