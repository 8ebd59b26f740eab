// A worker's accounting by flow class: per tenant (0: requests naming none) and per priority
// level, the requests it holds now (queued or executing), the requests it executed with their
// share of execution time (a batch's time split over its members by rows), and their queue
// waits as a cumulative histogram over common/histogram_bounds.h's bounds. Published in the
// status snapshot (shm/status.h) for /metrics and ferryctl tenants.
//
// Thread safety: the dispatch loop's alone.
#pragma once

#include <cstdint>

#include "common/priority.h"
#include "shm/status.h"

namespace ferry::worker {

class FlowStats {
 public:
  // `tenant` <= kMaxTenants and `priority` 0..kLowestPriority (0: the default level), as
  // descriptors are validated; larger ones are clamped.
  void Arrived(uint32_t tenant, uint32_t priority);
  // REQUIRES: the same request Arrived.
  void Left(uint32_t tenant, uint32_t priority);
  void Executed(uint32_t tenant, uint32_t priority, double compute_seconds, int64_t wait_ns);
  void Fill(shm::StatusSnapshotData& s) const;

 private:
  struct Flow {
    uint64_t held = 0;
    uint64_t requests = 0;
    double compute_seconds = 0;
    shm::WaitHistogramData waits{};
  };
  Flow& Tenant(uint32_t tenant);
  Flow& Level(uint32_t priority);
  static void Record(Flow& f, double compute_seconds, int64_t wait_ns);

  Flow tenants_[shm::kMaxTenants + 1];
  Flow levels_[kLowestPriority + 1];
};

}  // namespace ferry::worker
