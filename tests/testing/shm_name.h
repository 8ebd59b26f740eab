// A shared-memory name unique to this test process and call, so parallel tests never collide.
#pragma once

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>

namespace ferry::testing {

inline std::string UniqueShmName(const std::string& what) {
  static std::atomic<int> counter{0};
  auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return "ferry-test-" + what + "-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter.fetch_add(1)) + "-" + std::to_string(now % 1000000);
}

}  // namespace ferry::testing
