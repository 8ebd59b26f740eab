#include "bench/sim/sim_residency.h"

namespace ferry::sim {

SimResidency::SimResidency(const Scenario& scenario, Scheduler* scheduler)
    : scenario_(scenario),
      scheduler_(scheduler),
      budget_(scenario.weight_budget),
      cache_(&budget_, ResidencyMode::kManaged, 0),
      counts_(scenario.models.size()) {}

Result<std::unique_ptr<SimResidency>> SimResidency::Create(const Scenario& scenario,
                                                           const SchedulerConfig& config,
                                                           Scheduler* scheduler) {
  std::unique_ptr<SimResidency> r(new SimResidency(scenario, scheduler));
  SimResidency* self = r.get();
  for (size_t i = 0; i < scenario.models.size(); ++i) {
    const SimModel& m = scenario.models[i];
    auto index = static_cast<int>(i);
    self->cache_.Register(
        index, m.name, m.weight_bytes, config.ForModel(m.name).residency,
        [](uint64_t) { return OkStatus(); },  // The bytes move in virtual time (Advance).
        [self, index] {
          self->scheduler_->SetResident(index, false);
          if (self->counting_) {
            ++self->counts_[static_cast<size_t>(index)].evictions;
          }
        });
    scheduler->SetResident(index, false);
  }
  self->cache_.SetHasWork([self](int index) { return self->scheduler_->queue_depth(index) > 0; });
  FERRY_RETURN_IF_ERROR(self->cache_.LoadAtStart());
  for (size_t i = 0; i < scenario.models.size(); ++i) {
    scheduler->SetResident(static_cast<int>(i), self->cache_.resident(static_cast<int>(i)));
  }
  self->counting_ = true;
  return r;
}

void SimResidency::Advance(int64_t now) {
  if (loading_ >= 0 && now >= load_done_) {
    ResidencyCounts& c = counts_[static_cast<size_t>(loading_)];
    ++c.loads;
    c.load_seconds += load_seconds_;
    scheduler_->ChargeLoad(loading_, load_seconds_);
    scheduler_->SetResident(loading_, true);
    fresh_ = loading_;
    loading_ = -1;
  }
  if (loading_ >= 0) {
    return;
  }
  // As the worker does: a model just loaded runs before the next load may evict it (two
  // cold models would otherwise evict each other before either ran).
  if (fresh_ >= 0 && cache_.resident(fresh_) && scheduler_->queue_depth(fresh_) > 0) {
    return;
  }
  fresh_ = -1;
  int next = scheduler_->NextColdLoad();
  if (next < 0) {
    return;
  }
  if (scenario_.evict_all) {
    for (int victim : cache_.ResidentByRecency()) {
      cache_.Evict(victim);
    }
  }
  if (!cache_.Acquire(next).ok()) {  // Evicts what makes room (their releasers run).
    return;  // Cannot fit beside the pinned models: checked when the scenario was read.
  }
  loading_ = next;
  double bytes = static_cast<double>(scenario_.models[static_cast<size_t>(next)].weight_bytes);
  load_seconds_ = bytes / (scenario_.load_gb_per_s * 1e9);
  load_done_ = now + static_cast<int64_t>(load_seconds_ * 1e9) + 1;
}

void SimResidency::Touch(int model) {
  if (model == fresh_) {
    fresh_ = -1;
  }
  if (cache_.resident(model)) {
    (void)cache_.Acquire(model);  // Resident: only marks it most recently used.
  }
}

}  // namespace ferry::sim
