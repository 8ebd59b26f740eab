#include "worker/weight_residency.h"

#include <malloc.h>
#include <spdlog/spdlog.h>

#include <algorithm>

#include "common/clock.h"

namespace ferry::worker {

uint64_t ChooseWeightBudget(uint64_t configured, uint64_t most) {
  if (configured == 0) {
    return most;
  }
  return most != 0 ? std::min(configured, most) : configured;
}

WeightResidency::WeightResidency(Backend* backend, Scheduler* scheduler, ResidencyOptions options,
                                 std::function<void()> notify)
    : backend_(backend),
      scheduler_(scheduler),
      notify_(std::move(notify)),
      arena_(options.budget),
      cache_(&arena_, options.mode, 0),
      options_(options) {
  cache_.SetHasWork([this](int index) { return scheduler_->queue_depth(index) > 0; });
}

WeightResidency::~WeightResidency() {
  if (loading()) {
    (void)loader_.Wait();
  }
}

WeightResidency::Model& WeightResidency::At(int index) {
  if (models_.size() <= static_cast<size_t>(index)) {
    models_.resize(static_cast<size_t>(index) + 1);
  }
  return models_[static_cast<size_t>(index)];
}

bool WeightResidency::resident(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= models_.size() ||
      !models_[static_cast<size_t>(index)].registered) {
    return true;  // Not managed here: whatever the backend holds stays.
  }
  return models_[static_cast<size_t>(index)].counters.resident;
}

const ResidencyCounters& WeightResidency::counters(int index) const {
  static const ResidencyCounters kUnmanaged;
  if (index < 0 || static_cast<size_t>(index) >= models_.size()) {
    return kUnmanaged;
  }
  return models_[static_cast<size_t>(index)].counters;
}

Status WeightResidency::Add(int index, const std::string& name, ModelHandle handle,
                            Residency floor) {
  Model& m = At(index);
  m = Model{};
  m.handle = handle;
  m.in_memory = true;
  m.counters.bytes = backend_->WeightBytes(handle);
  uint64_t pinned = 0;
  for (size_t i = 0; i < models_.size(); ++i) {
    if (models_[i].registered && cache_.floor(static_cast<int>(i)) == Residency::kPinned) {
      pinned += models_[i].counters.bytes;
    }
  }
  std::string sizes = "model '" + name + "': its weights take " + std::to_string(m.counters.bytes) +
                      " bytes; the worker's weight budget is " + std::to_string(budget()) +
                      " bytes ([worker] weight_budget)";
  std::optional<Error> refused;
  if (m.counters.bytes > budget()) {
    refused = ResourceExhausted(sizes);
  } else if (m.counters.bytes > budget() - pinned) {
    refused =
        ResourceExhausted(sizes + ", " + std::to_string(pinned) + " of them held by pinned models");
  }
  if (refused) {
    backend_->ReleaseWeights(handle);
    m.in_memory = false;
    m.counters.resident = false;
    return *refused;
  }
  m.registered = true;
  cache_.Register(
      index, name, m.counters.bytes, floor, [this, index](uint64_t) { return QueueLoad(index); },
      [this, index] { QueueRelease(index); });
  bool keep = floor == Residency::kPinned ||
              (floor == Residency::kWarm && cache_.free_bytes() >= m.counters.bytes);
  if (keep) {
    (void)cache_.Acquire(index);  // Fits (checked above); evicts for a pinned one if need be.
  } else {
    backend_->ReleaseWeights(handle);
    m.in_memory = false;
    m.counters.resident = false;
    scheduler_->SetResident(index, false);
  }
  ReleaseIdle([](int) { return false; });  // No batch runs while models are added.
  return OkStatus();
}

void WeightResidency::Remove(int index) {
  if (index < 0 || static_cast<size_t>(index) >= models_.size() ||
      !models_[static_cast<size_t>(index)].registered) {
    return;
  }
  cache_.Remove(index);
  std::erase(pending_loads_, index);
  if (fresh_ == index) {
    fresh_ = -1;
  }
  models_[static_cast<size_t>(index)] = Model{};
}

Status WeightResidency::QueueLoad(int index) {
  Model& m = At(index);
  // Kept, or evicted and wanted back before it was released: nothing to move (unless a
  // compaction wants it rebuilt).
  if (m.in_memory && !(compacting_ && m.release_pending)) {
    m.release_pending = false;
    if (loading_ != index) {
      scheduler_->SetResident(index, true);
      m.counters.resident = true;
    }
    return OkStatus();
  }
  if (std::find(pending_loads_.begin(), pending_loads_.end(), index) == pending_loads_.end()) {
    pending_loads_.push_back(index);
  }
  return OkStatus();
}

void WeightResidency::QueueRelease(int index) {
  Model& m = At(index);
  scheduler_->SetResident(index, false);
  m.counters.resident = false;
  std::erase(pending_loads_, index);
  if (fresh_ == index) {
    fresh_ = -1;  // Out again before it ran (set on_demand): it no longer holds loads back.
  }
  if (m.in_memory) {
    m.release_pending = true;
    ++m.counters.evictions;
  }
}

void WeightResidency::ReleaseIdle(const std::function<bool(int)>& busy) {
  bool released = false;
  for (size_t i = 0; i < models_.size(); ++i) {
    Model& m = models_[i];
    auto index = static_cast<int>(i);
    if (m.release_pending && m.in_memory && loading_ != index && !busy(index)) {
      backend_->ReleaseWeights(m.handle);
      m.in_memory = false;
      m.release_pending = false;
      released = true;
    }
  }
  if (released) {
    malloc_trim(0);  // Freed weights go back to the system, not only to the heap.
  }
}

void WeightResidency::FinishLoad(std::vector<std::pair<int, Error>>* unservable) {
  if (!LoadFinished()) {
    return;
  }
  Result<ExecutionTiming> loaded = loader_.Wait();
  int index = loading_;
  loading_ = -1;
  Model& m = At(index);
  if (!loaded.ok()) {
    spdlog::error("weights of model index {} failed to load: {}", index, loaded.error().ToString());
    m.in_memory = false;
    m.release_pending = false;
    cache_.Evict(index);
    Unservable(index, loaded.error(), unservable);
    return;
  }
  ++m.counters.loads;
  ++cold_loads_;
  m.counters.load_seconds += loaded->load_seconds;
  m.counters.last_load_ns = MonotonicNs();
  double f = options_.max_load_fraction;
  next_load_ns_ =
      m.counters.last_load_ns + static_cast<int64_t>(loaded->load_seconds * (1 - f) / f * 1e9);
  if (!m.release_pending) {
    // Selectable from the virtual time on, then charged the load (in this order: a charge
    // made first would be lost to the new floor).
    scheduler_->SetResident(index, true);
    m.counters.resident = true;
    scheduler_->ChargeLoad(index, loaded->load_seconds);
    fresh_ = index;
  }
}

void WeightResidency::Unservable(int index, Error error, std::vector<std::pair<int, Error>>* out) {
  scheduler_->SetResident(index, true);  // Its queue drains through the model's failure.
  out->emplace_back(index, std::move(error));
}

void WeightResidency::StartLoad(std::vector<std::pair<int, Error>>* unservable) {
  auto releasing = [this] {
    return std::any_of(models_.begin(), models_.end(),
                       [](const Model& m) { return m.release_pending && m.in_memory; });
  };
  if (fresh_ >= 0 && scheduler_->queue_depth(fresh_) == 0) {
    fresh_ = -1;  // Nothing of it left to run.
  }
  if (loading() || releasing() || fresh_ >= 0 || LoadDelayNs(MonotonicNs()) > 0) {
    // One load at a time, into room already freed, and not before the model loaded last has
    // run: otherwise two backlogged models that do not fit together could evict each other
    // forever without either running.
    return;
  }
  if (pending_loads_.empty()) {
    int index = scheduler_->NextColdLoad();
    if (index < 0 || !At(index).registered) {
      return;
    }
    if (options_.evict_all) {
      (void)cache_.Compact({});  // Every non-pinned model out, none reloaded.
    }
    Result<double> room = cache_.Acquire(index);  // Evicts (QueueRelease), then QueueLoad.
    if (!room.ok()) {
      Unservable(index, room.error(), unservable);
      return;
    }
    if (releasing() || pending_loads_.empty()) {
      return;
    }
  }
  int index = pending_loads_.front();
  pending_loads_.pop_front();
  Model& m = At(index);
  m.in_memory = true;
  loading_ = index;
  loader_.Start(
      [backend = backend_, handle = m.handle]() -> Result<ExecutionTiming> {
        int64_t start = MonotonicNs();
        FERRY_RETURN_IF_ERROR(backend->RestoreWeights(handle));
        ExecutionTiming timing;
        timing.load_seconds = static_cast<double>(MonotonicNs() - start) * 1e-9;
        return timing;
      },
      notify_);
}

std::vector<std::pair<int, Error>> WeightResidency::Turn(const std::function<bool(int)>& busy,
                                                         bool may_start) {
  std::vector<std::pair<int, Error>> unservable;
  FinishLoad(&unservable);
  ReleaseIdle(busy);
  if (may_start) {
    StartLoad(&unservable);
  }
  return unservable;
}

void WeightResidency::Touch(int index) {
  if (index == fresh_) {
    fresh_ = -1;
  }
  if (index >= 0 && static_cast<size_t>(index) < models_.size() &&
      models_[static_cast<size_t>(index)].registered && cache_.resident(index)) {
    (void)cache_.Acquire(index);  // Resident: only marks it most recently used.
  }
}

Status WeightResidency::SetFloor(int index, Residency floor) {
  if (index < 0 || static_cast<size_t>(index) >= models_.size() ||
      !models_[static_cast<size_t>(index)].registered) {
    return OkStatus();  // No weights here (failed, a pipeline, another device's only).
  }
  Status set = cache_.SetFloor(index, floor);
  if (floor == Residency::kOnDemand) {
    cache_.Evict(index);
  }
  return set;
}

Status WeightResidency::Compact(const std::vector<int>& reload) {
  compacting_ = true;
  Status compacted = cache_.Compact(reload.empty() ? cache_.ResidentByRecency() : reload);
  compacting_ = false;
  return compacted;
}

}  // namespace ferry::worker
