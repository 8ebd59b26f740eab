// The worker scheduler's settings: the node file's [scheduler] and [scheduler.models.NAME]
// tables. Each key can also be overridden by the environment variable
// FERRY_SCHEDULER_<KEY> (e.g. FERRY_SCHEDULER_DISCIPLINE=fifo).
//
// Thread safety: plain data; requires external synchronization.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

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
  double recency_penalty_cap = 0.25;
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

  // Per-model overrides, by model name.
  std::map<std::string, ModelSchedulingConfig> models;

  // The model's settings, or the defaults when the file names none.
  ModelSchedulingConfig ForModel(const std::string& name) const;
};

}  // namespace ferry
