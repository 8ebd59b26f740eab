// How long a thread polls for work before it sleeps, where the operator left it to ferry.
//
// Polling saves the wake-up of a sleeping thread (tens of microseconds on a VM) per request
// at light load, at the price of a core while it polls. On fewer than 4 CPUs that core is
// one the worker, the hook host and the client need (measured: fewer requests/s at 2-4 in
// flight on a 2-CPU machine, docs/hookhost.md "Threads"), so the default is off there.
//
// Thread safety: safe for concurrent use.
#pragma once

#include <sched.h>

#include <cstdint>

namespace ferry {

inline constexpr int64_t kDefaultPollMicros = 200;
// How many times a worker's loop checks its rings before it sleeps (shm::WaitForWork), where
// it polls: about 50 us on a 2 GHz core.
inline constexpr int kPollingRingChecks = 2000;

// `configured` when it is set (>= 0); when absent (-1), kDefaultPollMicros with `usable_cpus`
// of 4 or more, else 0.
inline constexpr int64_t PollMicrosFor(int64_t configured, int usable_cpus) {
  if (configured >= 0) {
    return configured;
  }
  return usable_cpus >= 4 ? kDefaultPollMicros : 0;
}

// The ring checks before each sleep for a poll of `poll_micros` (PollMicrosFor's answer): none
// where the thread does not poll. Those checks are a poll too, taken before every sleep: on
// 2 CPUs they cost a worker 73 us of CPU per request at one request in flight over gRPC and
// gained no latency (docs/benchmarks.md, "Where the CPU goes").
inline constexpr int RingChecksFor(int64_t poll_micros) {
  return poll_micros > 0 ? kPollingRingChecks : 0;
}

// PollMicrosFor the CPUs the calling thread may run on (its affinity). Call it before a
// sandbox that hides the affinity.
inline int64_t PollMicros(int64_t configured) {
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  int usable = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  return PollMicrosFor(configured, usable);
}

}  // namespace ferry
