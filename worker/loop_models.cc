// The dispatch loop's models: those it starts with, live load and unload, control messages.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "common/log_settings.h"
#include "common/thread_name.h"
#include "model/repository.h"
#include "shm/control.h"
#include "shm/recovery.h"
#include "worker/dispatch_loop.h"
#include "worker/warm_up.h"
#include "worker/weight_residency.h"

namespace ferry::worker {
namespace {

// A descriptor names at most kMaxTensors tensors each way: a model with more fails.
void RefuseOversizeInterface(LoopModel& model) {
  if (!model.failure && model.bundle != nullptr &&
      std::max(model.bundle->manifest.inputs.size(), model.bundle->manifest.outputs.size()) >
          shm::kMaxTensors) {
    model.failure = InvalidArgument("model '" + model.name + "': more than " +
                                    std::to_string(shm::kMaxTensors) +
                                    " inputs or outputs cannot cross the rings");
  }
}

AnswerStats AnswersFor(const LoopModel& model) {
  return AnswerStats(model.bundle != nullptr ? model.bundle->manifest.batch_sizes
                                             : std::vector<int64_t>{});
}

// A stateful model's sequence table; null for any other (or one that failed).
std::unique_ptr<SequenceTable> SequencesFor(const LoopModel& model) {
  if (model.bundle == nullptr || !model.bundle->manifest.stateful()) {
    return nullptr;
  }
  return std::make_unique<SequenceTable>(model.bundle->manifest, model.name);
}

}  // namespace

DispatchLoop::DispatchLoop(const shm::Segment& segment, uint32_t worker_slot, Backend* backend,
                           Scheduler* scheduler, std::vector<LoopModel> models,
                           DispatchLoopOptions options)
    : segment_(segment),
      slot_(worker_slot),
      generation_(segment.generation(worker_slot).load(std::memory_order_acquire)),
      backend_(backend),
      scheduler_(scheduler),
      models_(std::move(models)),
      options_(options),
      arena_(segment, worker_slot),
      status_(segment, worker_slot),
      control_(segment, segment.ControlRing(worker_slot)),
      outstanding_(models_.size(), 0),
      errors_(models_.size(), 0),
      late_shed_(models_.size(), 0),
      planned_(nullptr),
      max_in_flight_(std::max(1, backend->MaxInFlight())),
      snapshot_(std::make_unique<shm::StatusSnapshotData>()) {
  for (LoopModel& model : models_) {
    answers_.push_back(AnswersFor(model));
    sequences_.push_back(SequencesFor(model));
    CountLoad(model);
    RefuseOversizeInterface(model);
  }
  uint32_t worker = worker_slot - segment.hookhosts();
  auto num_models = static_cast<uint32_t>(models_.size());
  for (uint32_t h = 0; h < segment.hookhosts(); ++h) {
    uint32_t hook_slot = segment.HookhostSlot(h);
    submissions_.emplace_back(segment, segment.SubmissionRing(h, worker));
    completions_.emplace_back(segment, segment.CompletionRing(worker, h));
    pending_.emplace_back();
    submit_rules_.push_back(
        {hook_slot,
         num_models,
         {hook_slot},
         segment.partition_bytes(),
         shm::KindBit(shm::DescriptorKind::kSubmit) | shm::KindBit(shm::DescriptorKind::kCancel)});
    release_rules_.push_back({hook_slot,
                              num_models,
                              {slot_},
                              segment.partition_bytes(),
                              shm::KindBit(shm::DescriptorKind::kRelease)});
  }
  backend_->SetNotifier([&segment, worker_slot] { shm::RingDoorbell(segment, worker_slot); });
}

bool DispatchLoop::DrainControl() {
  shm::DescriptorData d{};
  while (control_.TryPop(&d) == shm::RingStatus::kOk) {
    // A load names the next index, counting the loads decoded and not yet applied.
    Result<shm::ControlMessage> message =
        shm::DecodeControl(d, static_cast<uint32_t>(models_.size() + loads_.size()));
    if (message.ok() && message->code == shm::ControlCode::kUnloadModel &&
        message->model >= models_.size()) {
      unload_after_load_.push_back(message->model);  // Its load is decoded, not applied yet.
      continue;
    }
    if (message.ok() && message->code != shm::ControlCode::kLoadModel &&
        message->model >= models_.size()) {
      message =
          InvalidArgument("control: model " + std::to_string(message->model) + " is still loading");
    }
    if (!message.ok()) {
      control_.CountInvalid();
      spdlog::warn("worker slot {}: {}", slot_, message.error().ToString());
      continue;
    }
    Status applied = OkStatus();
    switch (message->code) {
      case shm::ControlCode::kStop:
        return false;
      case shm::ControlCode::kDrain:
        state_ = shm::ProcessState::kDraining;
        break;
      case shm::ControlCode::kSetPolicy:
        applied = scheduler_->SetPolicy(models_[message->model].name, message->weight);
        break;
      case shm::ControlCode::kSetResidency:
        applied = scheduler_->SetResidency(models_[message->model].name,
                                           static_cast<Residency>(message->value));
        break;
      case shm::ControlCode::kSetResidencyFloor:
        applied = scheduler_->SetResidencyFloor(models_[message->model].name,
                                                static_cast<Residency>(message->value));
        break;
      case shm::ControlCode::kCompact:
        applied = scheduler_->Compact({});
        break;
      case shm::ControlCode::kSetDiscipline:
        applied = scheduler_->SetDiscipline(static_cast<Discipline>(message->value));
        break;
      case shm::ControlCode::kSetMaxBatchSize:
        applied = scheduler_->SetMaxBatchSize(
            models_[message->model].name,
            message->value == 0 ? std::nullopt : std::optional<int64_t>(message->value));
        break;
      case shm::ControlCode::kSetMaxQueueDepth:
        applied = scheduler_->SetMaxQueueDepth(message->value);
        break;
      case shm::ControlCode::kSetTenantWeight:
        applied =
            scheduler_->SetTenantWeight(static_cast<uint32_t>(message->value), message->weight);
        break;
      case shm::ControlCode::kSetLogSettings: {
        LogSettings settings;
        LogSettings::Decode(message->value, &settings);  // DecodeControl checked the word.
        ApplyLogSettings(settings);
        spdlog::info("log settings now {:#x}", message->value);
        break;
      }
      case shm::ControlCode::kLoadModel:
        if (!options_.loader) {
          applied = Unavailable("this worker cannot load models");
          break;
        }
        loads_.push_back(message->name);
        break;
      case shm::ControlCode::kUnloadModel:
        UnloadModel(message->model);
        break;
    }
    if (!applied.ok()) {
      spdlog::warn("worker slot {}: control refused: {}", slot_, applied.error().ToString());
    }
  }
  return true;
}

bool DispatchLoop::ModelChangeReady() const {
  return !loads_.empty() || std::any_of(unloads_.begin(), unloads_.end(),
                                        [this](uint32_t m) { return outstanding_[m] == 0; });
}

void DispatchLoop::ApplyModelChanges() {
  if (!inflight_.empty() || !ModelChangeReady() ||
      (options_.residency != nullptr && options_.residency->loading())) {
    return;  // The backend is busy (launches wait meanwhile), or nothing to do.
  }
  while (!loads_.empty()) {
    LoadModel(loads_.front());
    loads_.pop_front();
  }
  for (uint32_t index : unload_after_load_) {
    UnloadModel(index);
  }
  unload_after_load_.clear();
  for (auto it = unloads_.begin(); it != unloads_.end();) {
    if (outstanding_[*it] != 0) {
      ++it;
      continue;
    }
    if (models_[*it].handle >= 0) {
      backend_->Unload(models_[*it].handle);
      ++model_unloads_;
      if (options_.residency != nullptr) {
        options_.residency->Remove(static_cast<int>(*it));
      }
    }
    sequences_[*it].reset();  // Nothing of it is queued or held: its states go.
    spdlog::info("worker slot {}: model index {} freed", slot_, *it);
    it = unloads_.erase(it);
  }
}

void DispatchLoop::LoadModel(const std::string& name) {
  // A load (weights read and uploaded, every executable built) may take a while: the
  // heartbeat goes on meanwhile, so ferryd does not take the pause for a hung device.
  std::atomic<bool> loading{true};
  std::thread beat([this, &loading] {
    NameThisThread("ferry-load-beat");
    while (loading.load()) {
      status_.Beat();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  AddModel(options_.loader(name));
  loading.store(false);
  beat.join();
}

void DispatchLoop::AddModel(LoadedModel loaded) {
  const std::string name = loaded.model.name;
  auto index = static_cast<uint32_t>(models_.size());
  CountLoad(loaded.model);
  RefuseOversizeInterface(loaded.model);
  Status added = scheduler_->AddModel(loaded.spec);
  if (!added.ok()) {
    // The index is taken all the same (every process numbers models alike): a placeholder.
    loaded.model.failure = added.error();
    ModelSpec placeholder;
    placeholder.name = UnloadedName(index);
    placeholder.batch_sizes = {1};
    (void)scheduler_->AddModel(placeholder);
  }
  if (loaded.model.failure) {
    spdlog::error("worker slot {}: model '{}' failed to load: {}", slot_, name,
                  loaded.model.failure->ToString());
  } else {
    spdlog::info("worker slot {}: model '{}' loaded as index {}", slot_, name, index);
  }
  loaded_bundles_.push_back(std::move(loaded.bundle));
  models_.push_back(std::move(loaded.model));
  outstanding_.push_back(0);
  errors_.push_back(0);
  late_shed_.push_back(0);
  answers_.push_back(AnswersFor(models_.back()));
  sequences_.push_back(SequencesFor(models_.back()));
  for (shm::DescriptorRules& rules : submit_rules_) {
    rules.num_models = static_cast<uint32_t>(models_.size());
  }
  for (shm::DescriptorRules& rules : release_rules_) {
    rules.num_models = static_cast<uint32_t>(models_.size());
  }
  // As at start: its costs seeded before its first request (no batch is in flight here),
  // then kept or released by its residency floor.
  WarmUp(*backend_, *scheduler_, models_, static_cast<int>(index));
  LoopModel& model = models_.back();
  if (options_.residency != nullptr && !model.failure && model.handle >= 0) {
    Status kept =
        options_.residency->Add(static_cast<int>(index), name, model.handle,
                                scheduler_->model(static_cast<int>(index)).config.residency);
    if (!kept.ok()) {
      spdlog::error("worker slot {}: {}", slot_, kept.error().ToString());
      model.failure = kept.error();
    }
  }
}

void DispatchLoop::CountLoad(const LoopModel& model) {
  if (model.pipeline || model.unloaded) {
    return;  // Nothing for this worker to load.
  }
  if (model.handle >= 0) {
    ++model_loads_;
    model_load_seconds_ += model.load_seconds;
  } else {
    ++model_load_failures_;
  }
}

void DispatchLoop::UnloadModel(uint32_t index) {
  LoopModel& model = models_[index];
  if (model.unloaded) {
    return;
  }
  spdlog::info("worker slot {}: model '{}' (index {}) unloaded; {} of its requests still run",
               slot_, model.name, index, outstanding_[index]);
  model.failure = NotFound("model '" + model.name + "' was unloaded");
  model.unloaded = true;
  model.name = UnloadedName(index);
  scheduler_->RetireModel(static_cast<int>(index), model.name);
  unloads_.push_back(index);
}

}  // namespace ferry::worker
