// Helpers for tests that drive a HookHost (hookhost/hookhost.h).
#pragma once

#include <doctest/doctest.h>

#include <chrono>
#include <fstream>
#include <future>
#include <sstream>
#include <string>

#include "hookhost/hookhost.h"
#include "tests/testing/temp_dir.h"

namespace ferry::testing {

// A response, or a failed test (never a hang) when none comes within a minute.
inline Result<hookhost::InferResponse> Get(std::future<Result<hookhost::InferResponse>>&& future) {
  if (future.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
    FAIL("no response within 60 s");
  }
  return future.get();
}
inline Result<hookhost::InferResponse> Get(std::future<Result<hookhost::InferResponse>>& future) {
  return Get(std::move(future));
}

inline std::string ReadAll(const std::string& path) { return ReadFile(path); }

}  // namespace ferry::testing
