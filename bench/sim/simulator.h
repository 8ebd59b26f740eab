// DESIGN: ferry-sim's discrete-event simulator. It drives the real Scheduler in virtual time:
// arrivals are generated from each stream's own seeded generator (so every run of a scenario
// — the scheduler under test, each baseline, each alternative — sees the identical
// workload), the GPU runs one dispatch at a time for the cost model's time, and figures are
// taken over [warmup, duration). The only real-time figure is the wall-clock cost of each
// scheduling decision (Scheduler::Next), measured with a steady clock.
//
// Thread safety: RunScenario is safe for concurrent use on distinct scenarios.
#pragma once

#include <string>
#include <vector>

#include "bench/sim/scenario.h"
#include "worker/scheduler.h"

namespace ferry::sim {

struct ModelReport {
  std::string name;
  double weight = 0;
  double share = 0;         // Of the GPU time used in the window.
  double target_share = 0;  // weight / sum of the weights of models with traffic; 0 if none.
  double throughput_rows_per_s = 0;
  double goodput_rows_per_s = 0;   // Rows finished within their deadline (or with none).
  double capacity_rows_per_s = 0;  // Best rows per second of the cost model, any size.
  double queue_wait_p50_s = 0;
  double queue_wait_p99_s = 0;
  uint64_t deadline_misses = 0;  // Requests finished after their deadline.
  uint64_t dropped = 0;          // Shed for their deadline, or rejected by a full queue.
  uint64_t rejected = 0;
  uint64_t dispatches = 0;
  uint64_t requests_completed = 0;
  double gpu_seconds = 0;
};

struct RunReport {
  std::string label;  // "ferry fair", "baseline: no coalescing", ...
  std::vector<ModelReport> models;
  double jain = 0;                 // Weighted Jain's index over models with traffic.
  double utilization = 0;          // GPU busy fraction of the window.
  double padding_waste = 0;        // Fraction of executed rows that were padding.
  double missed_gpu_fraction = 0;  // GPU time spent on requests that then missed.
  double goodput_vs_capacity = 0;  // Sum of goodput / best model capacity (one-model runs).
  double decision_ns_median = 0;
  double decision_ns_p99 = 0;
  uint64_t decisions = 0;
};

struct ScenarioReport {
  std::string scenario;
  RunReport ferry;
  std::vector<RunReport> alternatives;
  std::vector<RunReport> baselines;
};

// One run of the scenario's workload through a scheduler built with `config` and `options`.
Result<RunReport> RunOnce(const Scenario& scenario, const SchedulerConfig& config,
                          SchedulerOptions options, const std::string& label);

// The scenario, its alternatives, and (when enabled) the two baselines.
Result<ScenarioReport> RunScenario(const Scenario& scenario);

}  // namespace ferry::sim
