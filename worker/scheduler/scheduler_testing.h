// What the scheduler's tests share: model specs, requests, and a loop that drains a scheduler
// on virtual time.
//
// Thread safety: as Scheduler (single-threaded).
#pragma once

#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "worker/scheduler/scheduler.h"

namespace ferry::testing {

inline constexpr Nanos kMs = 1'000'000;

inline ModelSpec Spec(const std::string& name, std::vector<int64_t> sizes = {1, 8, 32}) {
  ModelSpec spec;
  spec.name = name;
  spec.batch_sizes = std::move(sizes);
  spec.wire_batch_input = "input";
  spec.wire_batch_axis = 1;
  return spec;
}

inline Scheduler Make(std::vector<ModelSpec> specs, SchedulerConfig config = {},
                      SchedulerOptions options = {}) {
  Result<Scheduler> s = Scheduler::Create(std::move(config), std::move(specs), options);
  REQUIRE_MESSAGE(s.ok(), (s.ok() ? "" : s.error().message));
  return std::move(s).value();
}

inline QueuedRequest Req(Nanos arrival, int64_t rows = 1, std::optional<Nanos> deadline = {},
                         uint64_t payload = 0) {
  QueuedRequest r;
  r.arrival = arrival;
  r.rows = rows;
  r.deadline = deadline;
  r.payload = payload;
  return r;
}

inline void Push(Scheduler& s, int model, QueuedRequest r) { REQUIRE(s.Enqueue(model, r).ok()); }

// Runs decisions until idle or `limit`, completing each dispatch with cost(model, size).
// Returns the model of each dispatch in order.
template <typename CostFn>
std::vector<int> Drain(Scheduler& s, Nanos& now, CostFn cost, int limit = 100000) {
  std::vector<int> order;
  for (int i = 0; i < limit; ++i) {
    Decision d = s.Next(now);
    if (!d.dispatch.runs()) {
      if (s.queued_requests() == 0) {
        break;
      }
      continue;
    }
    double seconds = cost(d.dispatch.model, d.dispatch.batch_size);
    now += static_cast<Nanos>(seconds * kNanosPerSecond);
    s.Complete(d.dispatch, seconds, now);
    order.push_back(d.dispatch.model);
  }
  return order;
}

}  // namespace ferry::testing
