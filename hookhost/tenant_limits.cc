#include "hookhost/tenant_limits.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "shm/tenant_counts.h"

namespace ferry::hookhost {
namespace {

constexpr int64_t kQueuedRetryMs = 100;

}  // namespace

TenantLimiter::TenantLimiter(const shm::Segment& segment, uint32_t hookhost,
                             std::vector<TenantLimit> limits)
    : segment_(segment),
      hookhost_(hookhost),
      own_(segment.frontend_counters(segment.HookhostSlot(hookhost))),
      limits_(std::move(limits)) {
  limits_.resize(shm::kMaxTenants + 1);
  limits_[0] = TenantLimit{};
  for (uint32_t t = 0; t <= shm::kMaxTenants; ++t) {
    own_.tenant_in_flight[t].store(0, std::memory_order_relaxed);
    buckets_.push_back(std::make_unique<Bucket>());
    // Full now; what the others admit from here on is taken from it.
    buckets_.back()->tokens = limits_[t].burst;
    buckets_.back()->others_admitted = shm::OthersAdmitted(segment_, hookhost_, t);
  }
}

uint64_t TenantLimiter::NodeInFlight(uint32_t tenant) const {
  return own_.tenant_in_flight[tenant].load(std::memory_order_relaxed) +
         shm::OthersInFlight(segment_, hookhost_, tenant);
}

Status TenantLimiter::TakeToken(uint32_t tenant, const TenantLimit& limit, int64_t now_ns) {
  Bucket& b = *buckets_[tenant];
  std::lock_guard<std::mutex> lock(b.mu);
  uint64_t others = shm::OthersAdmitted(segment_, hookhost_, tenant);
  // Before the first request the bucket was full (it cannot hold more).
  double elapsed = b.refilled_ns == 0
                       ? 0
                       : static_cast<double>(std::max<int64_t>(now_ns - b.refilled_ns, 0)) * 1e-9;
  double taken = static_cast<double>(others - std::min(others, b.others_admitted));
  b.tokens = std::max(std::min(limit.burst, b.tokens + elapsed * limit.rate) - taken, -limit.burst);
  b.refilled_ns = now_ns;
  b.others_admitted = others;
  if (b.tokens < 1.0) {
    auto wait_ms = static_cast<int64_t>(std::ceil((1.0 - b.tokens) / limit.rate * 1e3));
    return ResourceExhausted(fmt::format(
        "tenant '{}' is over its rate of {:g} requests/s (burst {:g}); retry after {} ms",
        limit.name, limit.rate, limit.burst, std::max<int64_t>(wait_ms, 1)));
  }
  b.tokens -= 1.0;
  return OkStatus();
}

Status TenantLimiter::Admit(uint32_t tenant, int64_t now_ns) {
  tenant = std::min<uint32_t>(tenant, shm::kMaxTenants);
  const TenantLimit& limit = limits_[tenant];
  // One step from the check to the count, so this host's own requests never pass the limit.
  std::unique_lock<std::mutex> lock(queued_mu_, std::defer_lock);
  if (limit.max_queued > 0) {
    lock.lock();
    uint64_t in_flight = NodeInFlight(tenant);
    if (in_flight >= limit.max_queued) {
      // When one will be answered is not known here: a short, fixed wait.
      return ResourceExhausted("tenant '" + limit.name + "' has " + std::to_string(in_flight) +
                               " requests in flight, its max_queued; retry after " +
                               std::to_string(kQueuedRetryMs) + " ms");
    }
  }
  if (limit.rate > 0) {
    FERRY_RETURN_IF_ERROR(TakeToken(tenant, limit, now_ns));
  }
  own_.tenant_in_flight[tenant].fetch_add(1, std::memory_order_relaxed);
  own_.tenant_admitted[tenant].fetch_add(1, std::memory_order_relaxed);
  return OkStatus();
}

void TenantLimiter::Release(uint32_t tenant) {
  own_.tenant_in_flight[std::min<uint32_t>(tenant, shm::kMaxTenants)].fetch_sub(
      1, std::memory_order_relaxed);
}

}  // namespace ferry::hookhost
