#include "supervisor/tenants_report.h"

#include <algorithm>

#include "shm/tenant_counts.h"

namespace ferry::supervisor {

using nlohmann::json;

namespace {

// The hook hosts' answers for tenant `t`, summed over hook hosts and models, by outcome
// (0: OK; o: error code o - 1).
std::vector<uint64_t> Answered(const shm::Segment& segment, size_t t) {
  std::vector<uint64_t> out(shm::kOutcomes, 0);
  for (uint32_t h = 0; h < segment.hookhosts(); ++h) {
    const shm::FrontEndCountersData& c = segment.frontend_counters(segment.HookhostSlot(h));
    for (size_t m = 0; m < shm::kMaxStatusModels; ++m) {
      for (size_t o = 0; o < shm::kOutcomes; ++o) {
        out[o] += c.models[m][t].answered[o].load(std::memory_order_relaxed);
      }
    }
  }
  return out;
}

}  // namespace

json TenantsReport(const NodeConfig& config, const std::map<uint32_t, double>& weights,
                   const shm::Segment& segment,
                   const std::vector<const shm::StatusSnapshotData*>& workers) {
  const std::vector<std::string>& names = config.frontend.tenants;
  size_t count = std::min<size_t>(names.size(), shm::kMaxTenants);
  std::vector<double> seconds(count + 1, 0.0);
  std::vector<uint64_t> executed(count + 1, 0);
  double total_seconds = 0;
  for (const shm::StatusSnapshotData* w : workers) {
    for (size_t t = 0; t <= count; ++t) {
      seconds[t] += w->tenant_compute_seconds[t];
      executed[t] += w->tenant_requests[t];
      total_seconds += w->tenant_compute_seconds[t];
    }
  }
  json tenants = json::array();
  for (size_t t = 0; t <= count; ++t) {
    json entry = {{"tenant", t == 0 ? "(none)" : names[t - 1]}};
    double weight = 1;
    if (auto it = config.scheduler.tenant_weights.find(static_cast<uint32_t>(t));
        it != config.scheduler.tenant_weights.end()) {
      weight = it->second;
    }
    if (auto it = weights.find(static_cast<uint32_t>(t)); it != weights.end()) {
      weight = it->second;
    }
    entry["weight"] = weight;
    json models = json::array();
    for (const TenantSettings& s : config.tenants) {
      if (t > 0 && s.name == names[t - 1]) {
        models = s.models;
      }
    }
    entry["models"] = models;
    std::vector<uint64_t> answered = Answered(segment, t);
    entry["served"] = answered[0];
    json refused = json::object();
    for (size_t o = 1; o < shm::kOutcomes; ++o) {
      if (answered[o] > 0) {
        refused[std::string(ErrorCodeName(static_cast<ErrorCode>(o - 1)))] = answered[o];
      }
    }
    entry["refused"] = refused;
    uint64_t in_flight = 0;
    for (uint32_t h = 0; h < segment.hookhosts(); ++h) {
      const shm::FrontEndCountersData& c = segment.frontend_counters(segment.HookhostSlot(h));
      in_flight +=
          std::min(c.tenant_in_flight[t].load(std::memory_order_relaxed), shm::kMaxSeenInFlight);
    }
    entry["in_flight"] = in_flight;
    for (const TenantSettings& s : config.tenants) {
      if (t > 0 && s.name == names[t - 1]) {
        entry["max_queued"] = s.max_queued;
        entry["rate"] = s.rate;
        entry["burst"] = s.burst;
      }
    }
    entry["executed"] = executed[t];
    entry["compute_seconds"] = seconds[t];
    entry["compute_share"] = total_seconds > 0 ? seconds[t] / total_seconds : 0.0;
    tenants.push_back(entry);
  }
  return json{{"tenants", tenants}};
}

}  // namespace ferry::supervisor
