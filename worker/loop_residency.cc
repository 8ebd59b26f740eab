// The dispatch loop's side of the weight budget (weight_residency.h): its turn, the control
// changes that move weights, and which models a release must wait for.
#include <spdlog/spdlog.h>

#include <algorithm>

#include "worker/dispatch_loop.h"
#include "worker/weight_residency.h"

namespace ferry::worker {

bool DispatchLoop::ModelBusy(int model) const {
  if (planned_ != nullptr && planned_->dispatch.model == model) {
    return true;
  }
  return std::any_of(inflight_.begin(), inflight_.end(), [model](const std::unique_ptr<Batch>& b) {
    return b->dispatch.model == model;
  });
}

void DispatchLoop::TurnResidency() {
  if (options_.residency == nullptr) {
    return;
  }
  auto unservable =
      options_.residency->Turn([this](int model) { return ModelBusy(model); }, !ModelChangeReady());
  for (auto& [index, error] : unservable) {
    LoopModel& model = models_[static_cast<size_t>(index)];
    spdlog::error("worker slot {}: model '{}' cannot be made resident: {}", slot_, model.name,
                  error.ToString());
    if (!model.failure) {
      model.failure = error;
    }
  }
}

void DispatchLoop::ApplyWeightControls(const std::vector<SchedulerChange>& controls) {
  if (options_.residency == nullptr) {
    return;
  }
  for (const SchedulerChange& change : controls) {
    Status applied = OkStatus();
    if (change.kind == SchedulerChange::Kind::kSetResidency) {
      applied = options_.residency->SetFloor(change.model, change.residency);
    } else if (change.kind == SchedulerChange::Kind::kCompact) {
      applied = options_.residency->Compact(change.models);
    }
    if (!applied.ok()) {
      spdlog::warn("worker slot {}: {}", slot_, applied.error().ToString());
    }
  }
}

}  // namespace ferry::worker
