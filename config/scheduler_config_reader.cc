#include "config/scheduler_config_reader.h"

#include <limits>

namespace ferry {

namespace {
constexpr int64_t kMaxInt = std::numeric_limits<int64_t>::max();
}  // namespace

// Reads the scalar [scheduler] keys: from the file, and again from each environment override.
void ReadSchedulerKeys(TableReader& r, SchedulerConfig* c) {
  r.Enum<Discipline>(
      "discipline", &c->discipline,
      {{"fair", Discipline::kFair}, {"fifo", Discipline::kFifo}, {"edf", Discipline::kEdf}});
  r.Double("ema_halflife_seconds", &c->ema_halflife_seconds, DoubleRange::Positive());
  if (r.Double("recency_penalty_cap", &c->recency_penalty_cap, {0.0, 1.0, true, false})) {
    c->deprecations.push_back(
        "scheduler.recency_penalty_cap is deprecated and ignored: fair sharing is start-time "
        "fair queueing, where a returning model holds no credit at all (the lag bound in "
        "docs/scheduler.md replaces the cap); remove the key");
  }
  r.Double("coalescing_discount", &c->coalescing_discount, {0.0, 1.0, false, true});
  r.Double("lower_level_share", &c->lower_level_share, {0.0, 0.5, false, false});
  r.Double("cost_ema_alpha", &c->cost_ema_alpha, {0.0, 1.0, true, false});
  r.Int("max_queue_depth", &c->max_queue_depth, 1, kMaxInt);
  r.Double("dispatch_timeout_seconds", &c->dispatch_timeout_seconds, DoubleRange::Positive());
  r.Int("compaction_interval", &c->compaction_interval, 0, kMaxInt);
  r.Enum<ResidencyMode>(
      "residency_mode", &c->residency_mode,
      {{"managed", ResidencyMode::kManaged}, {"external", ResidencyMode::kExternal}});
  r.Enum<BatchSizing>("batch_sizing", &c->batch_sizing,
                      {{"largest", BatchSizing::kLargest}, {"cost", BatchSizing::kCost}});
}

namespace {

void ReadModelScheduling(TableReader& r, ModelSchedulingConfig* m) {
  r.Double("weight", &m->weight, DoubleRange::Positive());
  int64_t max_batch = 0;
  if (r.Int("max_batch_size", &max_batch, 1, kMaxInt)) {
    m->max_batch_size = max_batch;
  }
  r.Enum<Residency>("residency", &m->residency,
                    {{"pinned", Residency::kPinned},
                     {"warm", Residency::kWarm},
                     {"on_demand", Residency::kOnDemand}});
}
}  // namespace

void ReadSchedulerTable(TableReader& r, SchedulerConfig* c) {
  ReadSchedulerKeys(r, c);
  if (auto models = r.Table("models")) {
    for (auto& [name, model_reader] : models->NamedTables()) {
      if (!IsValidModelKey(name)) {
        models->ErrorAt(name,
                        "not a model name: use 1 to 128 letters, digits, '_', '-' or '.', "
                        "not '.' or '..', or \"NAME/V\" for version V");
        continue;
      }
      ModelSchedulingConfig model;
      ReadModelScheduling(model_reader, &model);
      model_reader.Finish();
      c->models[name] = model;
    }
  }
  r.Finish();
}

}  // namespace ferry
