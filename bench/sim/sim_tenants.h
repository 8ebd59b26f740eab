// ferry-sim's figures by tenant and by priority level (simulator.cc feeds them): each tenant's
// share of the GPU time (a dispatch split by rows, as the worker's metrics split it), its
// queue waits, and its longest wait for service while backlogged against fair's tenant lag
// bound (docs/scheduler.md, "Tenants"); each level's share and waits.
//
// Thread safety: plain data, one run's thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench/sim/scenario.h"
#include "worker/scheduler/scheduler_types.h"
#include "worker/scheduler/wait_histogram.h"

namespace ferry::sim {

struct TenantReport {
  std::string name;  // "(none)" for requests naming no tenant.
  double weight = 1;
  double share = 0;         // Of the GPU time used in the window.
  double target_share = 0;  // weight / sum of the weights of tenants with traffic.
  double queue_wait_p50_s = 0;
  double queue_wait_p99_s = 0;
  uint64_t requests_completed = 0;
  // Over the whole run: the longest time from the end of a dispatch serving the tenant (or
  // its becoming backlogged) to the start of the next, and fair's bound on it:
  // (W / w_i - 1) d_i + sum_j D_j with the largest charges seen.
  double longest_gap_s = 0;
  double lag_bound_s = 0;
};

struct PriorityReport {
  int level = kDefaultPriority;
  double share = 0;
  double queue_wait_p50_s = 0;
  double queue_wait_p99_s = 0;
  uint64_t requests_completed = 0;
};

class TenantTallies {
 public:
  explicit TenantTallies(const Scenario& scenario);

  // `pieces` requests of `tenant` were queued at `at`.
  void Queued(uint32_t tenant, size_t pieces, Nanos at);
  // A queued request left without running (shed, failed) at `now`.
  void Left(const QueuedRequest& request, Nanos now);
  // Dispatch `d` ran from `start` to `finish` (`seconds`); `measured`: inside the window.
  void Ran(const Dispatch& d, Nanos start, Nanos finish, double seconds, bool measured);
  // The backlogs still waiting at `now` close their gaps.
  void Close(Nanos now);

  // Tenants with traffic (and "(none)" when some requests named none); levels with traffic.
  std::vector<TenantReport> Tenants() const;
  std::vector<PriorityReport> Priorities() const;

 private:
  struct Tally {
    int64_t queued = 0;
    Nanos backlog_start = 0;
    Nanos last_end = 0;
    Nanos longest_gap = 0;
    double gpu_seconds = 0;
    double largest_charge = 0;
    uint64_t completed = 0;
    WaitHistogram waits;
  };
  struct Level {
    double gpu_seconds = 0;
    uint64_t completed = 0;
    WaitHistogram waits;
  };

  const Scenario& scenario_;
  std::vector<Tally> tenants_;  // By tenant number; 0: none.
  std::vector<bool> has_traffic_;
  Level levels_[kLowestPriority + 1];
  double busy_ = 0;
};

}  // namespace ferry::sim
