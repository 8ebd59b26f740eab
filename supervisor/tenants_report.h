// What `ferryctl tenants` shows: per declared tenant, its weight in force, the models it may
// call, its limits (max_queued, rate, burst; 0: none), its requests in flight now (admitted by
// a hook host, not yet answered), the requests the hook hosts answered for it by outcome
// (served, and refused by reason), and the execution time the workers spent on it and its
// share of the node's.
//
// Thread safety: reads the segment's counters (atomics) and snapshots; any thread.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "config/node_config.h"
#include "shm/segment.h"
#include "shm/status.h"

namespace ferry::supervisor {

// `workers`: the running workers' last status snapshots; `weights`: live weights by tenant
// number (set_tenant), over the node file's.
nlohmann::json TenantsReport(const NodeConfig& config, const std::map<uint32_t, double>& weights,
                             const shm::Segment& segment,
                             const std::vector<const shm::StatusSnapshotData*>& workers);

}  // namespace ferry::supervisor
