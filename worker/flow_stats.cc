#include "worker/flow_stats.h"

#include <algorithm>
#include <limits>

#include "common/histogram_bounds.h"

namespace ferry::worker {

FlowStats::Flow& FlowStats::Tenant(uint32_t tenant) {
  return tenants_[std::min<uint32_t>(tenant, shm::kMaxTenants)];
}

FlowStats::Flow& FlowStats::Level(uint32_t priority) {
  uint32_t level = priority == 0 ? kDefaultPriority : priority;
  return levels_[std::min<uint32_t>(level, kLowestPriority)];
}

void FlowStats::Arrived(uint32_t tenant, uint32_t priority) {
  ++Tenant(tenant).held;
  ++Level(priority).held;
}

void FlowStats::Left(uint32_t tenant, uint32_t priority) {
  for (Flow* f : {&Tenant(tenant), &Level(priority)}) {
    f->held -= f->held > 0 ? 1 : 0;
  }
}

void FlowStats::Record(Flow& f, double compute_seconds, int64_t wait_ns) {
  ++f.requests;
  f.compute_seconds += compute_seconds;
  wait_ns = std::max<int64_t>(wait_ns, 0);
  for (size_t b = 0; b < kQueueWaitBuckets; ++b) {
    f.waits.le[b] += wait_ns <= kQueueWaitBoundsNs[b] ? 1 : 0;
  }
  ++f.waits.count;
  f.waits.sum_ns = wait_ns > std::numeric_limits<int64_t>::max() - f.waits.sum_ns
                       ? std::numeric_limits<int64_t>::max()
                       : f.waits.sum_ns + wait_ns;
}

void FlowStats::Executed(uint32_t tenant, uint32_t priority, double compute_seconds,
                         int64_t wait_ns) {
  Record(Tenant(tenant), compute_seconds, wait_ns);
  Record(Level(priority), compute_seconds, wait_ns);
}

void FlowStats::Fill(shm::StatusSnapshotData& s) const {
  for (size_t t = 0; t <= shm::kMaxTenants; ++t) {
    s.tenant_requests[t] = tenants_[t].requests;
    s.tenant_compute_seconds[t] = tenants_[t].compute_seconds;
    s.tenant_held[t] = tenants_[t].held;
    s.tenant_waits[t] = tenants_[t].waits;
  }
  for (size_t l = 0; l <= kLowestPriority; ++l) {
    s.priority_requests[l] = levels_[l].requests;
    s.priority_compute_seconds[l] = levels_[l].compute_seconds;
    s.priority_held[l] = levels_[l].held;
    s.priority_waits[l] = levels_[l].waits;
  }
}

}  // namespace ferry::worker
