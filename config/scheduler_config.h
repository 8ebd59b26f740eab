// The worker scheduler's settings: the node file's [scheduler] and [scheduler.models.NAME]
// tables. Each key can also be overridden by the environment variable
// FERRY_SCHEDULER_<KEY> (e.g. FERRY_SCHEDULER_DISCIPLINE=fifo).
//
// Thread safety: plain data; requires external synchronization.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ferry {

enum class Discipline {
  kFair,  // Deficit-weighted and cost-aware: GPU time shared by weight (default).
  kFifo,  // The model with the oldest queued request first; weights ignored.
  kEdf,   // The model with the soonest deadline first, shedding requests that cannot make it.
};
std::string_view DisciplineName(Discipline d);

enum class Residency {
  kPinned,    // Loaded at start, never evicted.
  kWarm,      // Loaded at start, evictable under memory pressure.
  kOnDemand,  // Loaded at first dispatch, evicted least-recently-used by bytes.
};
std::string_view ResidencyName(Residency r);

// Who moves models between residency floors.
enum class ResidencyMode {
  kManaged,   // The worker's weight cache follows each model's floor (default).
  kExternal,  // An external controller moves models with set_residency.
};
std::string_view ResidencyModeName(ResidencyMode m);

// How coalescing picks the compiled batch size.
enum class BatchSizing {
  kLargest,  // The largest compiled size the queued rows can fill (default).
  kCost,     // The compiled size with the most real rows per learned second.
};
std::string_view BatchSizingName(BatchSizing b);

// A model's name, as a bundle directory and in [scheduler.models.NAME]: 1 to 128 letters,
// digits, '_', '-' or '.', the first a letter, digit or '_' (so never "." or "..", which
// would leave the repository, nor "-", an unloaded index in ferryd's model table).
bool IsValidModelName(std::string_view name);

// A model key names one entry of the node's model table: a model name (a bundle directory)
// or "NAME/V", version V of a versioned model (a numbered sub-directory, docs/bundles.md,
// "Versions"): V a positive decimal of at most 18 digits without a leading zero, the whole at
// most 128 bytes. Workers, ferryctl, the status and [scheduler.models."KEY"] use keys.
bool IsValidModelKey(std::string_view key);
// The model name of a valid key ("mlp/2" -> "mlp", "mlp" -> "mlp").
std::string_view ModelKeyName(std::string_view key);
// The version of a valid key; 0 for a plain model name.
int64_t ModelKeyVersion(std::string_view key);

struct ModelSchedulingConfig {
  // Relative share of GPU time under fair: share = weight / sum of the busy models' weights.
  // Must be > 0. Default 1.0.
  double weight = 1.0;
  // Caps the rows one dispatch may carry; never changes compiled shapes or splits a request.
  // nullopt (default) = uncapped: the largest compiled batch size. Must be >= 1.
  std::optional<int64_t> max_batch_size;
  // Residency floor of the model's weights. Default warm.
  Residency residency = Residency::kWarm;
};

struct SchedulerConfig {
  // Which model the GPU serves next. Default fair.
  Discipline discipline = Discipline::kFair;
  // Half-life of each model's recent-compute EMA under fair. Shorter reacts faster to load
  // changes but lets bursts distort shares; longer is smoother but slower. > 0. Default 30.
  double ema_halflife_seconds = 30.0;
  // Bound on |share - recent compute| in the fair priority: limits both how far a quiet
  // model can run ahead and how long a saturated one can be held back. > 0, <= 1. Default 0.25.
  double recency_penalty_cap = 0.25;  // Deprecated: read, checked, ignored (docs/scheduler.md).
  // Warnings for deprecated keys present in the file or environment, one line each.
  std::vector<std::string> deprecations;
  // Fraction by which a coalesced batch's effective cost is lowered, favouring models that
  // can fill a batch. In [0, 1). Default 0.10.
  double coalescing_discount = 0.10;
  // Weight of a new measurement in the per-(model, variant, batch size) cost EMA. Larger
  // follows changes faster, smaller resists noise. In (0, 1]. Default 0.2.
  double cost_ema_alpha = 0.2;
  // Queued requests per model beyond which new ones are rejected at once
  // (RESOURCE_EXHAUSTED). >= 1. Default 1024.
  int64_t max_queue_depth = 1024;
  // Longest a dispatch may run before the worker is considered hung. > 0. Default 30.
  double dispatch_timeout_seconds = 30.0;
  // Compact the weight arena every N on-demand loads; 0 disables. >= 0. Default 0.
  int64_t compaction_interval = 0;
  // managed (default): residency follows each model's floor. external: an outside controller
  // moves models with set_residency, which is rejected in managed mode.
  ResidencyMode residency_mode = ResidencyMode::kManaged;
  // largest (default): the largest compiled size the queued rows can fill, as the seed
  // specifies. cost: the size serving the most real rows per learned second (e.g. pads 3 rows
  // to 4 rather than running three dispatches of 1); better throughput when padding is
  // cheap, at the price of padded rows.
  BatchSizing batch_sizing = BatchSizing::kLargest;

  // fair's tenant level: weight by tenant number (the node's tenants, 1-based, as the front
  // end numbers them; 0 = requests naming none). Absent: 1. Filled from [tenants.NAME] weight.
  std::map<uint32_t, double> tenant_weights;
  // [priorities.NAME]: a name and a max wait per priority level (index 1..3; 0 unused). A
  // request whose predicted queue wait under fair exceeds its level's max wait is refused at
  // once with a retry hint (docs/scheduler.md, "Admission by predicted wait"). 0: no limit.
  std::array<double, 4> max_wait_seconds{};
  std::array<std::string, 4> priority_names;

  // fair: within one tenant's flow at one model, while requests of a less urgent level wait,
  // at least this fraction of the flow's dispatches is led by the oldest of them (the others
  // by the most urgent request), so lower levels are never starved (docs/scheduler.md,
  // "Levels"). 0: strict priority. [0, 0.5]. Default 0.05.
  double lower_level_share = 0.05;

  // Per-model overrides, by model key: a model's name covers all its versions, "NAME/V" one.
  std::map<std::string, ModelSchedulingConfig> models;

  // The settings of the model key `name`: its own entry, else (for a version) its model's,
  // else the defaults.
  ModelSchedulingConfig ForModel(const std::string& name) const;
};

}  // namespace ferry
