// A ferry-sim scenario: models (weights, compiled sizes, a cost model with noise), arrival
// streams (saturating backlog, Poisson, bursts, CSV traces), rows and deadlines, and the
// scheduler settings, read from TOML. docs/simulator.md documents the format.
//
// Thread safety: plain data and pure functions; safe for concurrent use.
#pragma once

#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/priority.h"
#include "common/result.h"
#include "config/scheduler_config.h"

namespace ferry::sim {

// Execution time of one dispatch at a compiled size: a table entry if given, else
// fixed + per_row * size; each run is multiplied by max(0.05, 1 + noise * N(0, 1)).
// drift_per_second: the real cost grows (or shrinks) linearly over virtual time, times
// (1 + drift_per_second * t); warmup_factor: what warm-up measures, relative to the real cost
// at t = 0 (a warm-up that misjudges the model).
struct CostSpec {
  double fixed_seconds = 0.0005;
  double per_row_seconds = 0.00005;
  std::map<int64_t, double> table;
  double noise = 0.0;
  double drift_per_second = 0.0;
  double warmup_factor = 1.0;

  double Mean(int64_t batch_size) const;
};

struct TraceEvent {
  double time_seconds = 0;
  int64_t rows = 1;
  std::optional<double> deadline_seconds;
};

struct ArrivalSpec {
  enum class Kind { kSaturate, kPoisson, kBurst, kTrace, kClosed };
  Kind kind = Kind::kPoisson;
  std::string name;               // Reported per stream; default "MODEL/INDEX".
  int variant = 0;                // Shape variant of its requests.
  int64_t clients = 1;            // kClosed: clients, each with one request in flight.
  double think_seconds = 0;       // kClosed: mean (exponential) pause before the next request.
  double rate = 0;                // kPoisson: requests per second.
  int64_t backlog = 64;           // kSaturate: requests kept queued at all times.
  int64_t count = 0;              // kBurst: requests, all at at_seconds.
  double at_seconds = 0;          // kBurst.
  std::vector<TraceEvent> trace;  // kTrace: from the CSV file.
  double start_seconds = 0;
  double stop_seconds = std::numeric_limits<double>::infinity();
  int64_t rows_min = 1;  // Rows per request: uniform in [rows_min, rows_max].
  int64_t rows_max = 1;
  std::optional<double> deadline_seconds;  // Relative to arrival.
  uint32_t tenant = 0;                     // 1-based index into Scenario::tenants; 0: none.
  Priority priority = kDefaultPriority;    // Its requests' priority level.
};

// A tenant of the scenario (fair's tenant level): its requests are numbered by its position.
struct SimTenant {
  std::string name;
  double weight = 1.0;
};

struct SimModel {
  std::string name;
  double weight = 1.0;
  std::vector<int64_t> sizes = {1, 8, 32};  // [0]: an unbatched model (never coalesces).
  int variants = 1;                         // Shape variants (requests name theirs).
  std::optional<int64_t> max_batch_size;
  CostSpec cost;
  std::vector<ArrivalSpec> arrivals;
  uint64_t weight_bytes = 0;  // Under a weight budget: what its weights take.
};

// Another run of the same workload with some [scheduler] keys changed.
struct Alternative {
  std::string label;
  SchedulerConfig scheduler;
  std::optional<uint64_t> weight_budget;  // Another budget (e.g. one that holds every model).
  std::optional<bool> evict_all;          // Another eviction policy.
};

// A control command at a virtual time: set_policy (model, weight) or a discipline change.
struct ControlEvent {
  double at_seconds = 0;
  enum class Kind { kSetPolicy, kDiscipline };
  Kind kind = Kind::kSetPolicy;
  std::string model;
  double weight = 1.0;
  Discipline discipline = Discipline::kFair;
};

struct Scenario {
  std::string name;
  std::string description;
  double duration_seconds = 60;
  double warmup_seconds = 10;  // Excluded from every reported figure.
  uint64_t seed = 1;
  bool baselines = true;  // Also run "no coalescing" and "round robin" on the same workload.
  SchedulerConfig scheduler;
  std::vector<SimTenant> tenants;  // Tenant n is tenants[n - 1].
  std::vector<SimModel> models;
  std::vector<Alternative> alternatives;
  std::vector<ControlEvent> events;   // Ascending at_seconds.
  double share_window_seconds = 1.0;  // Length of each window of the share time series.
  // A worker's weight budget (0: every model resident, as without one), the loader's speed,
  // and the eviction policy ("lru", or "all": every cold load evicts every non-pinned model).
  uint64_t weight_budget = 0;
  double load_gb_per_s = 1.0;
  bool evict_all = false;
};

// Parses scenario text; `base_dir` resolves trace paths. Every error is reported at once.
Result<Scenario> ParseScenario(std::string_view text, const std::string& source,
                               const std::string& base_dir);
Result<Scenario> LoadScenario(const std::string& path);

// Parses a CSV trace: "time_seconds,rows[,deadline_seconds]" per line, an optional header,
// '#' comments. Errors name the line.
Result<std::vector<TraceEvent>> ParseTrace(std::string_view text, const std::string& source);

}  // namespace ferry::sim
