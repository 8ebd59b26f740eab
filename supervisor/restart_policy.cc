#include "supervisor/restart_policy.h"

#include <algorithm>

namespace ferry::supervisor {

RestartPolicy::RestartPolicy(const SupervisorSettings& settings)
    : initial_ns_(settings.restart_backoff_ms * 1'000'000),
      max_ns_(settings.restart_backoff_max_ms * 1'000'000),
      window_ns_(settings.crash_loop_window_seconds * 1'000'000'000),
      limit_(static_cast<size_t>(settings.crash_loop_restarts)) {}

int64_t RestartPolicy::OnDeath(int64_t started, int64_t now) {
  if (now - started >= window_ns_) {
    consecutive_ = 0;  // It ran a whole window: this death is not part of a loop.
  }
  ++consecutive_;
  deaths_.push_back(now);
  while (!deaths_.empty() && deaths_.front() <= now - window_ns_) {
    deaths_.pop_front();
  }
  if (CrashLooping(now)) {
    return max_ns_;
  }
  int64_t delay = initial_ns_;
  for (int i = 1; i < consecutive_ && delay < max_ns_; ++i) {
    delay *= 2;
  }
  return std::min(delay, max_ns_);
}

bool RestartPolicy::CrashLooping(int64_t now) const {
  size_t recent = static_cast<size_t>(std::count_if(
      deaths_.begin(), deaths_.end(), [&](int64_t t) { return t > now - window_ns_; }));
  return recent > limit_;
}

}  // namespace ferry::supervisor
