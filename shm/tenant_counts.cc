#include "shm/tenant_counts.h"

#include <algorithm>

#include "shm/status.h"

namespace ferry::shm {

void CopyTenantCounts(const Segment& segment) {
  for (uint32_t h = 0; h < segment.hookhosts(); ++h) {
    const FrontEndCountersData& c = segment.frontend_counters(segment.HookhostSlot(h));
    for (uint32_t t = 0; t <= kMaxTenants; ++t) {
      uint64_t in_flight = c.tenant_in_flight[t].load(std::memory_order_relaxed);
      segment.tenant_in_flight_seen(h, t).store(std::min(in_flight, kMaxSeenInFlight),
                                                std::memory_order_relaxed);
      // Cumulative: never moves back (a scribbled value then stays put until passed).
      uint64_t admitted = c.tenant_admitted[t].load(std::memory_order_relaxed);
      std::atomic<uint64_t>& seen = segment.tenant_admitted_seen(h, t);
      if (admitted > seen.load(std::memory_order_relaxed)) {
        seen.store(admitted, std::memory_order_relaxed);
      }
    }
  }
}

namespace {

uint64_t SaturatingAdd(uint64_t a, uint64_t b) { return a > UINT64_MAX - b ? UINT64_MAX : a + b; }

}  // namespace

uint64_t OthersInFlight(const Segment& segment, uint32_t self, uint32_t tenant) {
  uint64_t sum = 0;
  for (uint32_t h = 0; h < segment.hookhosts(); ++h) {
    if (h != self) {
      sum = SaturatingAdd(
          sum, std::min(segment.tenant_in_flight_seen(h, tenant).load(std::memory_order_relaxed),
                        kMaxSeenInFlight));
    }
  }
  return sum;
}

uint64_t OthersAdmitted(const Segment& segment, uint32_t self, uint32_t tenant) {
  uint64_t sum = 0;
  for (uint32_t h = 0; h < segment.hookhosts(); ++h) {
    if (h != self) {
      sum = SaturatingAdd(sum,
                          segment.tenant_admitted_seen(h, tenant).load(std::memory_order_relaxed));
    }
  }
  return sum;
}

}  // namespace ferry::shm
