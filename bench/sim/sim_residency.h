// A worker's weight budget in virtual time (issue 29; docs/simulator.md, "Weights"): the real
// WeightCache over a ByteBudget decides which models' weights are resident (floors, least
// recent use, idle before backlogged), the real Scheduler never selects a model whose weights
// are out and names the one to load next (NextColdLoad), and a cold load takes
// weight_bytes / load_gb_per_s of virtual time on a loader beside execution (a CPU worker's
// loader thread, a GPU's second stream), one at a time, charged to its model's share when
// it finishes (ChargeLoad). `eviction = "all"` is the naive baseline: every cold load first
// evicts every non-pinned model.
//
// Thread safety: one simulation's thread.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <vector>

#include "bench/sim/scenario.h"
#include "common/result.h"
#include "worker/backends/weight_cache.h"
#include "worker/scheduler/scheduler.h"

namespace ferry::sim {

struct ResidencyCounts {
  uint64_t loads = 0;  // Cold loads finished (the start's loads not counted).
  uint64_t evictions = 0;
  double load_seconds = 0;
};

class SimResidency {
 public:
  static constexpr int64_t kNoEvent = std::numeric_limits<int64_t>::max();

  // Registers every model with its bytes and floor and loads the start's (pinned, then the
  // warm ones that fit); the rest start out. RESOURCE_EXHAUSTED when the pinned models do
  // not fit. REQUIRES: scenario.weight_budget > 0; `scheduler` outlives this object.
  static Result<std::unique_ptr<SimResidency>> Create(const Scenario& scenario,
                                                      const SchedulerConfig& config,
                                                      Scheduler* scheduler);

  // At virtual time `now` (ns): a load due by now finishes (its model selectable again, the
  // load charged to it); then, the loader idle, the next cold load starts, its room made
  // first.
  void Advance(int64_t now);
  // A dispatch of `model` ran: most recently used.
  void Touch(int model);
  // When the load in flight finishes (kNoEvent: none).
  int64_t next_event() const { return loading_ < 0 ? kNoEvent : load_done_; }
  const std::vector<ResidencyCounts>& counts() const { return counts_; }

 private:
  SimResidency(const Scenario& scenario, Scheduler* scheduler);

  const Scenario& scenario_;
  Scheduler* scheduler_;
  ByteBudget budget_;
  WeightCache cache_;
  std::vector<ResidencyCounts> counts_;
  bool counting_ = false;  // Evictions count once the start's loads are done.
  int loading_ = -1;       // The model whose load is in flight.
  int fresh_ = -1;         // Loaded and not yet dispatched: no load may evict it meanwhile.
  int64_t load_done_ = 0;
  double load_seconds_ = 0;
};

}  // namespace ferry::sim
