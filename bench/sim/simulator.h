// DESIGN: ferry-sim's discrete-event simulator. It drives the real Scheduler in virtual time:
// arrivals are generated from each stream's own seeded generator (so every run of a scenario
// — the scheduler under test, each baseline, each alternative — sees the identical
// workload), the GPU runs one dispatch at a time for the cost model's time, and figures are
// taken over [warmup, duration). The only real-time figure is the wall-clock cost of each
// scheduling decision (Scheduler::Next), measured with a steady clock.
//
// Thread safety: RunScenario is safe for concurrent use on distinct scenarios.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "bench/sim/scenario.h"
#include "bench/sim/sim_tenants.h"
#include "worker/scheduler/scheduler.h"

namespace ferry::sim {

// One arrival stream's outcome (a deadline class, a tenant): requests count once, when their
// last piece completes.
struct StreamReport {
  std::string name;
  uint64_t completed = 0;
  uint64_t met = 0;      // Completed within their deadline (or with none).
  uint64_t missed = 0;   // Completed late.
  uint64_t dropped = 0;  // Shed, refused or failed.
  double goodput_rows_per_s = 0;
};

// One window of the share time series.
struct ShareWindow {
  double start_s = 0;
  std::vector<double> shares;      // Of the GPU time used in the window, per model.
  std::vector<double> backlogged;  // Fraction of the window each model had work queued.
  std::vector<double> targets;     // weight x backlogged, normalised over the models.
};

// One dispatch, for --trace.
struct TraceRow {
  double start_s = 0;
  double end_s = 0;
  int model = 0;
  int variant = 0;
  int64_t batch_size = 0;
  int64_t rows = 0;
  size_t requests = 0;
};

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
  // Longest time from the end of one of its dispatches (or from becoming backlogged) to the
  // start of its next, while it had work queued; over the whole run, transitions included.
  double longest_gap_s = 0;
  // fair's bound on that gap (docs/scheduler.md): (W / w_i - 1) d_i + sum_j D_j with the
  // longest dispatches seen, W the weights of the models with traffic (largest weights any
  // event gave them) and w_i model i's smallest weight.
  double lag_bound_s = 0;
  double max_queue_wait_s = 0;
  std::map<int64_t, uint64_t> batch_size_histogram;  // Compiled size -> dispatches.
  std::vector<StreamReport> streams;
  // Under a weight budget (sim_residency.h), over the whole run: cold loads, evictions and
  // the loads' virtual seconds.
  uint64_t weight_loads = 0;
  uint64_t weight_evictions = 0;
  double weight_load_seconds = 0;
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
  std::vector<ShareWindow> windows;  // Over the whole run, share_window_seconds each.
  // With [[tenants]] or priority levels in the scenario: shares and waits by each.
  std::vector<TenantReport> tenants;
  std::vector<PriorityReport> priorities;
};

struct ScenarioReport {
  std::string scenario;
  RunReport ferry;
  std::vector<RunReport> alternatives;
  std::vector<RunReport> baselines;
};

// One run of the scenario's workload through a scheduler built with `config` and `options`.
// `trace`, when given, receives every dispatch.
Result<RunReport> RunOnce(const Scenario& scenario, const SchedulerConfig& config,
                          SchedulerOptions options, const std::string& label,
                          std::vector<TraceRow>* trace = nullptr);

// The scenario, its alternatives, and (when enabled) the two baselines.
// `trace` receives the scheduler's run (not the alternatives' or baselines').
Result<ScenarioReport> RunScenario(const Scenario& scenario,
                                   std::vector<TraceRow>* trace = nullptr);

}  // namespace ferry::sim
