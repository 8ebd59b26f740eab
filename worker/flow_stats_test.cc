// FlowStats: held requests up and down, executed requests' compute and cumulative wait
// buckets per tenant and level, the default level for 0, out-of-range numbers clamped.
#include "worker/flow_stats.h"

#include <doctest/doctest.h>

#include <memory>

#include "common/histogram_bounds.h"

namespace ferry::worker {
namespace {

TEST_CASE("flows count what the worker holds and how long each tenant and level waited") {
  FlowStats flows;
  flows.Arrived(2, 0);  // Level 0 is the default level.
  flows.Arrived(2, 1);
  flows.Arrived(0, 3);
  auto s = std::make_unique<shm::StatusSnapshotData>();
  flows.Fill(*s);
  CHECK(s->tenant_held[2] == 2);
  CHECK(s->tenant_held[0] == 1);
  CHECK(s->priority_held[kDefaultPriority] == 1);
  CHECK(s->priority_held[1] == 1);
  CHECK(s->priority_held[3] == 1);

  flows.Executed(2, 1, 0.25, 300'000);  // 0.3 ms: above 0.25 ms, within 0.5 ms.
  flows.Left(2, 1);
  flows.Executed(2, 0, 0.75, 20'000'000);
  flows.Left(2, 0);
  flows.Fill(*s);
  CHECK(s->tenant_held[2] == 0);
  CHECK(s->tenant_requests[2] == 2);
  CHECK(s->tenant_compute_seconds[2] == 1.0);
  const shm::WaitHistogramData& w = s->tenant_waits[2];
  CHECK(w.count == 2);
  CHECK(w.sum_ns == 20'300'000);
  CHECK(w.le[0] == 0);  // <= 0.1 ms
  CHECK(w.le[1] == 0);  // <= 0.25 ms
  CHECK(w.le[2] == 1);  // <= 0.5 ms
  CHECK(w.le[7] == 2);  // <= 25 ms
  CHECK(w.le[kQueueWaitBuckets - 1] == 2);
  CHECK(s->priority_waits[1].count == 1);
  CHECK(s->priority_waits[kDefaultPriority].count == 1);
  CHECK(s->priority_requests[1] == 1);
  CHECK(s->priority_compute_seconds[kDefaultPriority] == 0.75);

  // Never below zero, whatever the caller does; numbers past the tables land in the last.
  flows.Left(2, 1);
  flows.Arrived(99, 7);
  flows.Fill(*s);
  CHECK(s->tenant_held[2] == 0);
  CHECK(s->tenant_held[shm::kMaxTenants] == 1);
  CHECK(s->priority_held[kLowestPriority] == 2);
}

}  // namespace
}  // namespace ferry::worker
