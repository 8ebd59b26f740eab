// Requests in flight and admitted per tenant, across the node's hook hosts. Each hook host
// counts its own in its FrontEndCountersData (status.h) as it admits and answers; hook hosts
// cannot map one another's objects, so ferryd copies every hook host's counts into its own
// object each tick (CopyTenantCounts), where every hook host reads the others'
// (hookhost/tenant_limits.h; ferryctl tenants' "in flight").
//
// The counts come from sandboxed processes that run plugins: ferryd clamps what it copies,
// and readers add with saturation.
//
// Thread safety: CopyTenantCounts from ferryd's one thread; the readers from any.
#pragma once

#include <cstdint>

#include "shm/segment.h"

namespace ferry::shm {

// What any one hook host may claim to have in flight for a tenant (more is scribbled).
inline constexpr uint64_t kMaxSeenInFlight = uint64_t{1} << 24;

// REQUIRES: the supervisor's view of `segment`.
void CopyTenantCounts(const Segment& segment);

// The sum over hook hosts other than `self` (every one when self is kSupervisor), as ferryd
// last copied them.
uint64_t OthersInFlight(const Segment& segment, uint32_t self, uint32_t tenant);
uint64_t OthersAdmitted(const Segment& segment, uint32_t self, uint32_t tenant);

}  // namespace ferry::shm
