// Per-tenant limits across the node, checked by each hook host as a request is submitted:
// [tenants.NAME] max_queued (requests admitted and not yet answered) and rate with burst (a
// token bucket). Refusals are RESOURCE_EXHAUSTED (HTTP 429) naming the limit and ending
// "retry after N ms" (common/result.h RetryAfterMs; the HTTP front end's Retry-After).
//
// What a hook host sees: its own requests exactly (its FrontEndCountersData counts, moved as
// it admits and answers) and the other hook hosts' as ferryd last copied them
// (shm/tenant_counts.h, every ferryd tick of 20 ms). With one hook host both limits are
// exact. With several, a tenant can pass max_queued by what the other hook hosts admitted
// since ferryd's last copy, and its bucket by what they admitted within one tick: both at
// most one tick of the other hook hosts' admissions (docs/security.md, "Tenant limits").
//
// Rate: every hook host keeps the node's bucket for the tenant. It refills at `rate` up to
// `burst` and gives one token for each request admitted anywhere in the node (its own at
// once, the others' as ferryd's copy grows), so every hook host drains the same bucket and a
// client whose connection stays on one hook host still gets the tenant's whole rate. The debt
// others' admissions can leave is at most one burst.
//
// Thread safety: Admit and Release from any thread. Lifetime: the segment outlives it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/result.h"
#include "shm/segment.h"
#include "shm/status.h"

namespace ferry::hookhost {

struct TenantLimit {
  std::string name;
  uint64_t max_queued = 0;  // 0: none.
  double rate = 0;          // Requests per second; 0: none.
  double burst = 0;
};

class TenantLimiter {
 public:
  // `limits`: by tenant number (index 0, anonymous, is never limited but is counted);
  // entries past kMaxTenants are ignored. REQUIRES: `segment` attached as hook host
  // `hookhost`'s slot (or the supervisor's view, for tests). Zeroes this hook host's in-flight
  // counts: a predecessor's requests died with it.
  TenantLimiter(const shm::Segment& segment, uint32_t hookhost, std::vector<TenantLimit> limits);

  // Admits one request of `tenant` (<= kMaxTenants) at `now_ns` (monotonic): OK, and it is
  // counted in flight until Release; or RESOURCE_EXHAUSTED, counted nowhere.
  Status Admit(uint32_t tenant, int64_t now_ns);
  // REQUIRES: `tenant`'s request was admitted and not released.
  void Release(uint32_t tenant);
  // Requests of `tenant` in flight across the node, as this hook host sees them.
  uint64_t NodeInFlight(uint32_t tenant) const;

 private:
  struct Bucket {
    std::mutex mu;
    double tokens = 0;
    int64_t refilled_ns = 0;  // 0: not yet used (full since construction).
    uint64_t others_admitted = 0;
  };
  Status TakeToken(uint32_t tenant, const TenantLimit& limit, int64_t now_ns);

  const shm::Segment& segment_;
  uint32_t hookhost_;
  shm::FrontEndCountersData& own_;
  std::vector<TenantLimit> limits_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::mutex queued_mu_;  // Makes max_queued's check and count one step.
};

}  // namespace ferry::hookhost
