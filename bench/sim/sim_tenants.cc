#include "bench/sim/sim_tenants.h"

#include <algorithm>
#include <map>

namespace ferry::sim {

TenantTallies::TenantTallies(const Scenario& scenario)
    : scenario_(scenario),
      tenants_(scenario.tenants.size() + 1),
      has_traffic_(scenario.tenants.size() + 1, false) {
  for (const SimModel& m : scenario.models) {
    for (const ArrivalSpec& a : m.arrivals) {
      has_traffic_[a.tenant] = true;
    }
  }
}

void TenantTallies::Queued(uint32_t tenant, size_t pieces, Nanos at) {
  Tally& t = tenants_[tenant];
  if (t.queued == 0) {
    t.backlog_start = at;
  }
  t.queued += static_cast<int64_t>(pieces);
}

void TenantTallies::Left(const QueuedRequest& request, Nanos now) {
  Tally& t = tenants_[request.tenant];
  if (--t.queued == 0) {
    // Its backlog ended by shedding: that wait counts as a gap too.
    t.longest_gap = std::max(t.longest_gap, now - std::max(t.last_end, t.backlog_start));
  }
}

void TenantTallies::Ran(const Dispatch& d, Nanos start, Nanos finish, double seconds,
                        bool measured) {
  std::map<uint32_t, int64_t> rows;
  for (const QueuedRequest& r : d.requests) {
    rows[r.tenant] += r.rows;
    if (measured) {
      tenants_[r.tenant].waits.Record(start - r.arrival);
      ++tenants_[r.tenant].completed;
      levels_[r.priority].waits.Record(start - r.arrival);
      ++levels_[r.priority].completed;
      levels_[r.priority].gpu_seconds +=
          seconds * static_cast<double>(r.rows) / static_cast<double>(d.rows);
    }
  }
  for (const auto& [tenant, n] : rows) {
    Tally& t = tenants_[tenant];
    double charge = seconds * static_cast<double>(n) / static_cast<double>(d.rows);
    t.longest_gap = std::max(t.longest_gap, start - std::max(t.last_end, t.backlog_start));
    t.largest_charge = std::max(t.largest_charge, charge);
    t.last_end = finish;
    if (measured) {
      t.gpu_seconds += charge;
    }
  }
  for (const QueuedRequest& r : d.requests) {
    --tenants_[r.tenant].queued;
  }
  if (measured) {
    busy_ += seconds;
  }
}

void TenantTallies::Close(Nanos now) {
  for (Tally& t : tenants_) {
    if (t.queued > 0) {
      t.longest_gap = std::max(t.longest_gap, now - std::max(t.last_end, t.backlog_start));
    }
  }
}

std::vector<TenantReport> TenantTallies::Tenants() const {
  auto weight = [&](size_t t) { return t == 0 ? 1.0 : scenario_.tenants[t - 1].weight; };
  double total_weight = 0, charges = 0;
  for (size_t t = 0; t < tenants_.size(); ++t) {
    if (has_traffic_[t]) {
      total_weight += weight(t);
      charges += tenants_[t].largest_charge;
    }
  }
  std::vector<TenantReport> out;
  for (size_t t = 0; t < tenants_.size(); ++t) {
    if (!has_traffic_[t]) {
      continue;
    }
    const Tally& tally = tenants_[t];
    TenantReport r;
    r.name = t == 0 ? "(none)" : scenario_.tenants[t - 1].name;
    r.weight = weight(t);
    r.share = busy_ > 0 ? tally.gpu_seconds / busy_ : 0;
    r.target_share = r.weight / total_weight;
    r.queue_wait_p50_s = static_cast<double>(tally.waits.Percentile(0.50)) / 1e9;
    r.queue_wait_p99_s = static_cast<double>(tally.waits.Percentile(0.99)) / 1e9;
    r.requests_completed = tally.completed;
    r.longest_gap_s = static_cast<double>(tally.longest_gap) / 1e9;
    r.lag_bound_s =
        (total_weight / r.weight - 1) * tally.largest_charge + (charges - tally.largest_charge);
    out.push_back(std::move(r));
  }
  return out;
}

std::vector<PriorityReport> TenantTallies::Priorities() const {
  std::vector<PriorityReport> out;
  for (int level = kHighestPriority; level <= kLowestPriority; ++level) {
    const Level& l = levels_[level];
    if (l.completed == 0) {
      continue;
    }
    out.push_back({level, busy_ > 0 ? l.gpu_seconds / busy_ : 0,
                   static_cast<double>(l.waits.Percentile(0.50)) / 1e9,
                   static_cast<double>(l.waits.Percentile(0.99)) / 1e9, l.completed});
  }
  return out;
}

}  // namespace ferry::sim
