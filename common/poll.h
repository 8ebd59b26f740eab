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

// `configured` when it is set (>= 0); when absent (-1), kDefaultPollMicros where this process
// may run on 4 or more CPUs (its affinity), else 0. Call it before a sandbox that hides the
// affinity.
inline int64_t PollMicros(int64_t configured) {
  if (configured >= 0) {
    return configured;
  }
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  int usable = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
  return usable >= 4 ? kDefaultPollMicros : 0;
}

}  // namespace ferry
