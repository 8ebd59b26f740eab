// When ferryd restarts a process that died: exponential backoff, and crash-loop detection.
//
// The n-th consecutive death waits min(initial * 2^(n-1), max). A process that stayed up for
// a whole crash-loop window has its count reset, so a rare crash restarts at once again.
// More than `crash_loop_restarts` deaths within the window make the process crash-looping:
// the node reports degraded and the process is still restarted, at the longest backoff,
// so a transient cause (a full disk, a GPU reset) heals without an operator. ferryd never
// gives up on a process silently.
//
// Thread safety: plain data; ferryd's one thread. Times are CLOCK_MONOTONIC nanoseconds,
// passed in (tests use their own).
#pragma once

#include <cstdint>
#include <deque>

#include "config/node_config.h"

namespace ferry::supervisor {

class RestartPolicy {
 public:
  explicit RestartPolicy(const SupervisorSettings& settings);

  // Records a death at `now` after a run that started at `started`; returns the delay in
  // nanoseconds before the successor starts.
  int64_t OnDeath(int64_t started, int64_t now);
  // Whether more than crash_loop_restarts deaths fall within the window ending at `now`.
  bool CrashLooping(int64_t now) const;
  int consecutive() const { return consecutive_; }

 private:
  int64_t initial_ns_;
  int64_t max_ns_;
  int64_t window_ns_;
  size_t limit_;
  int consecutive_ = 0;
  std::deque<int64_t> deaths_;  // Within the window, oldest first.
};

}  // namespace ferry::supervisor
