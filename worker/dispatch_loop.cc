#include "worker/dispatch_loop.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/clock.h"
#include "model/repository.h"
#include "shm/control.h"
#include "shm/recovery.h"

namespace ferry {
namespace {

static_assert(shm::kMaxPriority == kLowestPriority && shm::kDefaultPriority == kDefaultPriority,
              "descriptor priorities are the scheduler's levels");

constexpr uint32_t ErrorStatus(ErrorCode code) { return static_cast<uint32_t>(code) + 1; }
constexpr size_t kMaxMessageBytes = 1024;

// Bytes of output `o` for a request of `rows` rows (the whole tensor without a batch axis).
uint64_t OutputBytes(const Manifest& manifest, size_t o, int variant, int64_t rows) {
  return static_cast<uint64_t>(RequestBytes(
      manifest, manifest.outputs[o], manifest.variants[static_cast<size_t>(variant)], false, rows));
}

// The concrete shape of a tensor of `variant` for `rows` rows.
Shape ConcreteShape(const Shape& declared, const TensorSpec& spec, int64_t rows) {
  Shape shape = declared;
  if (spec.batch_axis) {
    shape[static_cast<size_t>(*spec.batch_axis)] = rows;
  }
  return shape;
}

// True when `t` has `spec`'s dtype and `declared` shape with `rows` at the batch axis
// (compared in place: this runs for every submission).
bool Matches(const shm::TensorRefData& t, const Shape& declared, const TensorSpec& spec,
             int64_t rows) {
  if (t.dtype != static_cast<uint16_t>(spec.dtype) || t.rank != declared.size()) {
    return false;
  }
  for (size_t k = 0; k < declared.size(); ++k) {
    bool batch = spec.batch_axis && k == static_cast<size_t>(*spec.batch_axis);
    if (t.shape[k] != (batch ? rows : declared[k])) {
      return false;
    }
  }
  return true;
}

// A completion's header for request `d`, sent by this worker incarnation.
shm::DescriptorData CompletionFor(const shm::DescriptorData& d, uint32_t hook_slot,
                                  uint32_t worker_generation) {
  shm::DescriptorData c{};
  c.kind = static_cast<uint16_t>(shm::DescriptorKind::kCompletion);
  c.slot = hook_slot;
  c.generation = d.generation;
  c.sequence = d.sequence;
  c.model = d.model;
  c.sender_generation = worker_generation;
  c.trace_id_high = d.trace_id_high;
  c.trace_id_low = d.trace_id_low;
  return c;
}

uint32_t SaturatingMicros(double us) {
  if (!(us > 0)) {
    return 0;
  }
  return us >= 4294967295.0 ? UINT32_MAX : static_cast<uint32_t>(us);
}

}  // namespace

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

int DispatchLoop::Run() {
  state_ = shm::ProcessState::kReady;
  PublishStatus(state_);
  while (Turn()) {
  }
  Shutdown();
  state_ = unhealthy_ ? shm::ProcessState::kUnhealthy : shm::ProcessState::kStopped;
  PublishStatus(state_);
  return unhealthy_ ? 3 : 0;
}

void DispatchLoop::Shutdown() {
  // Every batch begun is finished (the backend must not touch a job after the loop is gone)
  // and answered; after a fault its results are not trusted.
  while (!inflight_.empty()) {
    Result<ExecutionTiming> timing = Internal("unset");
    std::unique_ptr<Batch> batch = FinishBatch(&timing);
    if (unhealthy_) {
      timing = Unavailable("worker slot " + std::to_string(slot_) + " is restarting");
    }
    AnswerBatch(std::move(batch), timing);
  }
  Error gone = Unavailable("worker slot " + std::to_string(slot_) +
                           (unhealthy_ ? " is restarting" : " stopped"));
  if (planned_ != nullptr) {
    FailBatch(*planned_, gone);
    planned_.reset();
  }
  // Queued requests are answered too, so no hook host waits on a worker that left.
  while (scheduler_->queued_requests() > 0) {
    Decision decision = scheduler_->Next(MonotonicNs());
    const Dispatch& d = decision.dispatch;
    if (d.requests.empty() && d.shed.empty() && d.failed.empty()) {
      break;  // Nothing decided (cannot happen with work queued): never spin here.
    }
    AnswerShedAndFailed(decision.dispatch);
    for (const QueuedRequest& q : decision.dispatch.requests) {
      FailRequest(static_cast<uint32_t>(q.payload), gone);
    }
  }
  // Completions wait for ring space a little while (a hook host reading them frees it).
  for (int i = 0; i < 2000 && HasPendingCompletions(); ++i) {
    FlushCompletions();
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

bool DispatchLoop::HasPendingCompletions() const {
  return std::any_of(pending_.begin(), pending_.end(), [](const auto& p) { return !p.empty(); });
}

bool DispatchLoop::Turn() {
  status_.Beat();
  if (!DrainControl()) {
    stopping_ = true;
  }
  // The executor first: finished batches are collected and the planned one begun before
  // anything else, then the finished ones answered, so host work stays off the critical path.
  std::vector<std::pair<std::unique_ptr<Batch>, Result<ExecutionTiming>>> finished;
  while (!inflight_.empty() && backend_->Ready()) {
    Result<ExecutionTiming> timing = Internal("unset");
    std::unique_ptr<Batch> batch = FinishBatch(&timing);
    finished.emplace_back(std::move(batch), std::move(timing));
  }
  CheckHealth();
  bool clean =
      std::all_of(finished.begin(), finished.end(), [](const auto& f) { return f.second.ok(); });
  if (!stopping_ && !unhealthy_ && clean && planned_ != nullptr && !ModelChangeReady() &&
      static_cast<int>(inflight_.size()) < max_in_flight_) {
    Launch();
  }
  for (auto& [batch, timing] : finished) {
    AnswerBatch(std::move(batch), timing);
  }
  FlushCompletions();
  if (unhealthy_) {
    return false;
  }
  ApplyModelChanges();
  int64_t now = MonotonicNs();
  for (uint32_t h = 0; h < submissions_.size(); ++h) {
    DrainSubmissions(h, now);
  }
  // Decide the next batch while fewer than max(2, MaxInFlight) are decided and unfinished
  // (one ahead of the execution, or as deep as the backend queues), then begin it if the
  // backend has room.
  size_t decided = inflight_.size() + (planned_ != nullptr ? 1 : 0);
  bool may_plan = inflight_.empty() || (options_.plan_ahead &&
                                        decided < static_cast<size_t>(std::max(2, max_in_flight_)));
  if (!stopping_ && planned_ == nullptr && may_plan &&
      (inflight_.empty() || scheduler_->queued_requests() > 0)) {
    Plan(now);
  }
  if (!stopping_ && planned_ != nullptr && !ModelChangeReady() &&
      static_cast<int>(inflight_.size()) < max_in_flight_) {
    Launch();
  }
  FlushCompletions();
  if (unhealthy_) {
    return false;
  }
  if (now - last_status_ns_ >= options_.status_interval_ns) {
    Reap();
    PublishStatus(state_);
  }
  bool busy = !inflight_.empty() || planned_ != nullptr;
  bool work_left = busy || scheduler_->queued_requests() > 0;
  if (stopping_) {
    return false;  // Shutdown() finishes what is in flight and answers the rest.
  }
  if (state_ == shm::ProcessState::kDraining && !work_left) {
    return false;
  }
  if (!work_left || !inflight_.empty() || HasPendingCompletions()) {
    Sleep();
  }
  return true;
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
  if (!inflight_.empty() || !ModelChangeReady()) {
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
    }
    spdlog::info("worker slot {}: model index {} freed", slot_, *it);
    it = unloads_.erase(it);
  }
}

void DispatchLoop::LoadModel(const std::string& name) {
  // A load (weights read and uploaded, every executable built) may take a while: the
  // heartbeat goes on meanwhile, so ferryd does not take the pause for a hung device.
  std::atomic<bool> loading{true};
  std::thread beat([this, &loading] {
    while (loading.load()) {
      status_.Beat();
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  });
  LoadedModel loaded = options_.loader(name);
  loading.store(false);
  beat.join();
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
  for (shm::DescriptorRules& rules : submit_rules_) {
    rules.num_models = static_cast<uint32_t>(models_.size());
  }
  for (shm::DescriptorRules& rules : release_rules_) {
    rules.num_models = static_cast<uint32_t>(models_.size());
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

bool DispatchLoop::HookhostAlive(uint32_t h, uint32_t generation) const {
  return shm::IsCurrent(segment_, segment_.HookhostSlot(h), generation);
}

void DispatchLoop::DrainSubmissions(uint32_t h, int64_t now) {
  // At most one ring's worth per turn, and only while this hook host's completion backlog is
  // under one ring: a host that pushes without pause cannot hold the loop here (starving
  // execution and the other hosts), and one that does not read its completions gets no more
  // of its submissions drained until it does.
  shm::DescriptorData d{};
  uint32_t limit = segment_.ring_capacity();
  for (uint32_t n = 0; n < limit && pending_[h].size() < limit &&
                       submissions_[h].TryPop(&d) == shm::RingStatus::kOk;
       ++n) {
    bool release = d.kind == static_cast<uint16_t>(shm::DescriptorKind::kRelease);
    bool cancel = d.kind == static_cast<uint16_t>(shm::DescriptorKind::kCancel);
    Status valid = shm::ValidateDescriptor(d, release ? release_rules_[h] : submit_rules_[h]);
    if (!valid.ok()) {
      submissions_[h].CountInvalid();
      ++invalid_;
      if (!release && !cancel) {
        CompleteError(h, d, valid.error());
      }
      continue;
    }
    if (cancel) {
      Cancel(h, d);
      continue;
    }
    if (release) {
      auto it = lent_.find({d.slot, d.generation, d.sequence});
      if (it != lent_.end()) {
        (void)arena_.Free(it->second);
        lent_.erase(it);
      }
      continue;
    }
    Submit(h, d, now);
  }
}

Status DispatchLoop::CheckInputs(const LoopModel& model, const shm::DescriptorData& d) const {
  const Manifest& manifest = model.bundle->manifest;
  auto where = [&] { return "model '" + model.name + "': "; };
  if (d.variant < 0 || static_cast<size_t>(d.variant) >= manifest.variants.size()) {
    return InvalidArgument(where() + "no shape variant " + std::to_string(d.variant));
  }
  if (d.num_tensors != manifest.inputs.size()) {
    return InvalidArgument(where() + "expected " + std::to_string(manifest.inputs.size()) +
                           " input tensors, got " + std::to_string(d.num_tensors));
  }
  if (manifest.unbatched() && d.rows != 1) {
    return InvalidArgument(where() + "an unbatched model takes one row per request");
  }
  const ShapeVariant& variant = manifest.variants[static_cast<size_t>(d.variant)];
  for (size_t i = 0; i < manifest.inputs.size(); ++i) {
    const TensorSpec& spec = manifest.inputs[i];
    const shm::TensorRefData& t = d.tensors[i];
    if (!Matches(t, variant.inputs.at(spec.name), spec, d.rows)) {
      return InvalidArgument(where() + "input '" + spec.name + "' does not match variant '" +
                             variant.name + "' (dtype " + std::string(SafetensorsName(spec.dtype)) +
                             ", " + std::to_string(d.rows) + " rows)");
    }
  }
  return OkStatus();
}

void DispatchLoop::Submit(uint32_t h, const shm::DescriptorData& d, int64_t now) {
  if (!HookhostAlive(h, d.generation)) {
    return;  // From a dead incarnation: dropped without reading its inputs.
  }
  const LoopModel& model = models_[d.model];
  if (state_ == shm::ProcessState::kDraining) {
    CompleteError(h, d, Unavailable("worker slot " + std::to_string(slot_) + " is draining"));
    return;
  }
  if (model.failure) {
    CompleteError(h, d, *model.failure);
    return;
  }
  Status inputs = CheckInputs(model, d);
  if (!inputs.ok()) {
    CompleteError(h, d, inputs.error());
    return;
  }
  RequestKey key{d.slot, d.generation, d.sequence};
  if (live_.count(key) != 0 || lent_.count(key) != 0) {
    // A request id still queued, executing or holding a completion block: answering it
    // would confuse the two (and lose track of a block).
    ++invalid_;
    submissions_[h].CountInvalid();
    CompleteError(h, d,
                  InvalidArgument("request id " + std::to_string(d.sequence) + " of slot " +
                                  std::to_string(d.slot) + " is already in use"));
    return;
  }
  uint32_t id = NewRequest(h, static_cast<int>(d.model), d);
  QueuedRequest q;
  q.payload = id;
  q.variant = d.variant;
  q.rows = d.rows;
  // Requests drained in one pass share `now`; one nanosecond apart each keeps their ring
  // order, so fifo serves them as they arrived (not by the tie-break, the model's name).
  int64_t arrival = std::max(now, last_arrival_ns_ + 1);
  last_arrival_ns_ = arrival;
  q.arrival = arrival;
  q.priority = d.priority == 0 ? kDefaultPriority : d.priority;
  q.tenant = d.tenant;
  requests_[id].arrival_ns = arrival;
  if (d.deadline_ns != 0) {
    q.deadline = d.deadline_ns;
  }
  Status queued;
  // A pipeline's committed call jumps the scan, one per pipeline run; a second call of the
  // same run queued meanwhile (a pipeline calling models at once) waits like new work.
  uint64_t meta = uint64_t{d.slot} << 48 | uint64_t{d.generation & 0xffff} << 32 | d.meta;
  if (d.meta != 0 && !scheduler_->CommittedPending(meta)) {
    q.meta_id = meta;
    queued = scheduler_->EnqueueCommitted(static_cast<int>(d.model), q);
  } else {
    queued = scheduler_->Enqueue(static_cast<int>(d.model), q);
  }
  if (!queued.ok()) {
    FreeRequest(id);  // First: the id must not be live for the message block to be lent.
    CompleteError(h, d, queued.error());
    return;
  }
  ++outstanding_[d.model];
}

void DispatchLoop::Cancel(uint32_t h, const shm::DescriptorData& d) {
  auto it = live_.find({d.slot, d.generation, d.sequence});
  if (it == live_.end()) {
    return;  // Answered already (or never submitted): nothing to take back.
  }
  uint32_t id = it->second;
  const Request& r = requests_[id];
  // The request id is the sender's, but the model must be the one it was queued under.
  if (r.hookhost != h || r.model != static_cast<int>(d.model) || !scheduler_->Cancel(r.model, id)) {
    return;  // Planned or executing: it runs and is answered as usual.
  }
  FailRequest(id, Cancelled("model '" + models_[static_cast<size_t>(r.model)].name +
                            "': cancelled while queued (the client left)"));
}

uint32_t DispatchLoop::NewRequest(uint32_t h, int model, const shm::DescriptorData& d) {
  uint32_t id;
  if (!free_ids_.empty()) {
    id = free_ids_.back();
    free_ids_.pop_back();
  } else {
    id = static_cast<uint32_t>(requests_.size());
    requests_.emplace_back();
  }
  Request& r = requests_[id];
  r.hookhost = h;
  r.model = model;
  r.descriptor = d;
  r.has_block = false;
  live_.emplace(RequestKey{d.slot, d.generation, d.sequence}, id);
  return id;
}

void DispatchLoop::FailRequest(uint32_t id, const Error& error) {
  Request& r = requests_[id];
  // The id leaves the live set first, so the error's message block may be lent under it.
  live_.erase({r.descriptor.slot, r.descriptor.generation, r.descriptor.sequence});
  CompleteError(r.hookhost, r.descriptor, error);
  Answered(r.model);
  FreeRequest(id);
}

void DispatchLoop::FreeRequest(uint32_t id) {
  Request& r = requests_[id];
  live_.erase({r.descriptor.slot, r.descriptor.generation, r.descriptor.sequence});
  if (r.has_block) {
    (void)arena_.Free(r.block);
    r.has_block = false;
  }
  free_ids_.push_back(id);
}

void DispatchLoop::Answered(int model) {
  if (model >= 0 && outstanding_[static_cast<size_t>(model)] > 0) {
    --outstanding_[static_cast<size_t>(model)];
  }
}

void DispatchLoop::AnswerShedAndFailed(const Dispatch& d) {
  for (const QueuedRequest& q : d.shed) {
    const Request& r = requests_[q.payload];
    FailRequest(static_cast<uint32_t>(q.payload),
                DeadlineExceeded("model '" + models_[static_cast<size_t>(r.model)].name +
                                 "': the deadline cannot be met; shed before execution"));
  }
  for (const QueuedRequest& q : d.failed) {
    FailRequest(static_cast<uint32_t>(q.payload),
                d.failure.value_or(Internal("request failed without a reason")));
  }
}

void DispatchLoop::Plan(int64_t now) {
  Decision decision = scheduler_->Next(now);
  Dispatch& d = decision.dispatch;
  AnswerShedAndFailed(d);
  if (!d.runs()) {
    return;
  }
  std::unique_ptr<Batch> batch = TakeSpare();
  const LoopModel& model = models_[static_cast<size_t>(d.model)];
  const Manifest& manifest = model.bundle->manifest;
  batch->job.variant = d.variant;
  batch->job.batch_size = d.batch_size;
  batch->job.requests.clear();
  batch->members.clear();
  for (const QueuedRequest& q : d.requests) {
    auto id = static_cast<uint32_t>(q.payload);
    Request& r = requests_[id];
    if (!HookhostAlive(r.hookhost, r.descriptor.generation)) {
      Answered(r.model);
      FreeRequest(id);  // Its hook host died: dropped before any GPU work.
      continue;
    }
    uint64_t total = 0;
    for (size_t o = 0; o < manifest.outputs.size(); ++o) {
      total =
          shm::AlignUp(total, shm::kBlockAlignment) + OutputBytes(manifest, o, d.variant, q.rows);
    }
    Result<shm::Block> block = arena_.Allocate(std::max<uint64_t>(total, 1));
    if (!block.ok()) {
      FailRequest(id, block.error());
      continue;
    }
    r.block = block->offset;
    r.has_block = true;
    std::span<uint8_t> bytes = arena_.Bytes(*block);
    RequestIo io;
    io.rows = q.rows;
    for (size_t i = 0; i < manifest.inputs.size(); ++i) {
      io.inputs.push_back(shm::TensorBytes(segment_, r.descriptor.tensors[i]));
    }
    uint64_t offset = 0;
    for (size_t o = 0; o < manifest.outputs.size(); ++o) {
      offset = shm::AlignUp(offset, shm::kBlockAlignment);
      uint64_t n = OutputBytes(manifest, o, d.variant, q.rows);
      io.outputs.push_back(bytes.subspan(offset, n));
      offset += n;
    }
    batch->job.requests.push_back(std::move(io));
    batch->members.push_back(id);
  }
  batch->dispatch = std::move(d);
  if (batch->members.empty()) {
    // Nothing left to run. Complete() is for dispatches that ran: the charge made at dispatch
    // (its learned cost) stays, and no cost sample is recorded.
    spares_.push_back(std::move(batch));
    return;
  }
  planned_ = std::move(batch);
}

void DispatchLoop::Launch() {
  std::unique_ptr<Batch> batch = std::move(planned_);
  auto index = static_cast<size_t>(batch->dispatch.model);
  const LoopModel& model = models_[index];
  int64_t begin_ns = MonotonicNs();
  // A batch planned while another executed may hold requests whose deadline passed since:
  // shed them now, before any GPU work.
  size_t kept = 0;
  for (size_t k = 0; k < batch->members.size(); ++k) {
    uint32_t id = batch->members[k];
    Request& r = requests_[id];
    if (r.descriptor.deadline_ns != 0 && r.descriptor.deadline_ns <= begin_ns) {
      ++late_shed_[index];
      FailRequest(id,
                  DeadlineExceeded("model '" + model.name +
                                   "': the deadline passed in the queue; shed before execution"));
      continue;
    }
    if (kept != k) {
      batch->members[kept] = id;
      batch->job.requests[kept] = std::move(batch->job.requests[k]);
    }
    ++kept;
  }
  batch->members.resize(kept);
  batch->job.requests.resize(kept);
  if (kept == 0) {
    spares_.push_back(std::move(batch));  // Nothing runs: no cost sample (see Plan).
    return;
  }
  Status begun = backend_->Begin(model.handle, batch->job);
  if (!begun.ok()) {
    FailBatch(*batch, begun.error());
    spares_.push_back(std::move(batch));
    return;
  }
  batch->launched_ns = begin_ns;
  inflight_.push_back(std::move(batch));
  ++dispatches_;
}

std::unique_ptr<DispatchLoop::Batch> DispatchLoop::TakeSpare() {
  if (spares_.empty()) {
    return std::make_unique<Batch>();
  }
  std::unique_ptr<Batch> batch = std::move(spares_.back());
  spares_.pop_back();
  return batch;
}

std::unique_ptr<DispatchLoop::Batch> DispatchLoop::FinishBatch(Result<ExecutionTiming>* timing) {
  *timing = backend_->Finish();
  std::unique_ptr<Batch> batch = std::move(inflight_.front());
  inflight_.pop_front();
  if (timing->ok() && (*timing)->started_ns > 0) {
    // Device idle time between two batches while work was waiting: host time on the
    // critical path (a batch queued behind another starts with none).
    if (backlog_at_finish_ && last_finished_ns_ > 0) {
      host_gaps_.Record(std::max<int64_t>(0, (*timing)->started_ns - last_finished_ns_));
    }
    last_finished_ns_ = (*timing)->finished_ns;
  }
  backlog_at_finish_ =
      !inflight_.empty() || planned_ != nullptr || scheduler_->queued_requests() > 0;
  return batch;
}

void DispatchLoop::AnswerBatch(std::unique_ptr<Batch> batch,
                               const Result<ExecutionTiming>& timing) {
  int64_t now = MonotonicNs();
  if (!timing.ok()) {
    FailBatch(*batch, timing.error());
  } else {
    int64_t batch_rows = 0;
    for (uint32_t id : batch->members) {
      batch_rows += requests_[id].descriptor.rows;
    }
    for (uint32_t id : batch->members) {
      Request& r = requests_[id];
      uint32_t tenant = r.descriptor.tenant;  // Validated: <= kMaxTenants.
      ++tenant_requests_[tenant];
      tenant_compute_seconds_[tenant] += timing->compute_seconds *
                                         static_cast<double>(r.descriptor.rows) /
                                         static_cast<double>(std::max<int64_t>(batch_rows, 1));
      if (HookhostAlive(r.hookhost, r.descriptor.generation)) {
        CompleteOk(r, *batch, *timing);
        r.has_block = false;  // Lent to the hook host until it releases it.
      }
      Answered(r.model);
      FreeRequest(id);
    }
    scheduler_->Complete(batch->dispatch, timing->compute_seconds, now);
  }
  CheckHealth();
  spares_.push_back(std::move(batch));
}

void DispatchLoop::CheckHealth() {
  if (!unhealthy_ && !backend_->Healthy()) {
    unhealthy_ = true;
    spdlog::error("worker slot {}: backend unhealthy; exiting for a restart", slot_);
  }
}

void DispatchLoop::FailBatch(Batch& batch, const Error& error) {
  auto model = static_cast<size_t>(batch.dispatch.model);
  Error failure{error.code == ErrorCode::kInvalidArgument ? ErrorCode::kInternal : error.code,
                error.message};
  if (error.code != ErrorCode::kUnavailable) {  // Not the worker stopping.
    spdlog::warn("worker slot {}: model '{}': batch failed: {}", slot_, models_[model].name,
                 error.ToString());
  }
  for (uint32_t id : batch.members) {
    ++errors_[model];
    FailRequest(id, failure);
  }
  // No Complete(): a failed batch's time is no cost sample; the charge made at dispatch stays.
  Status status = backend_->ModelStatus(models_[model].handle);
  if (!status.ok() && !models_[model].failure) {
    models_[model].failure = status.error();  // Later requests fail at once.
  }
  CheckHealth();
}

void DispatchLoop::CompleteOk(const Request& r, const Batch& batch, const ExecutionTiming& timing) {
  const shm::DescriptorData& d = r.descriptor;
  const Manifest& manifest = models_[static_cast<size_t>(r.model)].bundle->manifest;
  shm::DescriptorData c = CompletionFor(d, d.slot, generation_);
  c.batch_size = static_cast<int32_t>(batch.dispatch.batch_size);
  c.rows = d.rows;
  int64_t started = timing.started_ns != 0 ? timing.started_ns : batch.launched_ns;
  c.timing.queue_us = SaturatingMicros(static_cast<double>(started - r.arrival_ns) * 1e-3);
  c.timing.compute_us = SaturatingMicros(timing.compute_seconds * 1e6);
  c.num_tensors = static_cast<uint16_t>(manifest.outputs.size());
  const ShapeVariant& variant = manifest.variants[static_cast<size_t>(d.variant)];
  uint64_t offset = r.block;
  for (size_t o = 0; o < manifest.outputs.size(); ++o) {
    const TensorSpec& spec = manifest.outputs[o];
    offset = r.block + shm::AlignUp(offset - r.block, shm::kBlockAlignment);
    Shape shape = ConcreteShape(variant.outputs.at(spec.name), spec, d.rows);
    uint64_t bytes = OutputBytes(manifest, o, d.variant, d.rows);
    c.tensors[o] = shm::MakeTensorRef(slot_, offset, bytes, spec.dtype, shape);
    offset += bytes;
  }
  if (!lent_.try_emplace({d.slot, d.generation, d.sequence}, r.block).second) {
    // Cannot happen (Submit refuses a live or lent id); never lose the block if it does.
    (void)arena_.Free(r.block);
    CompleteError(r.hookhost, d, Internal("request id lent twice"));
    return;
  }
  pending_[r.hookhost].push_back(c);
}

void DispatchLoop::CompleteError(uint32_t h, const shm::DescriptorData& d, const Error& error) {
  shm::DescriptorData c = CompletionFor(d, segment_.HookhostSlot(h), generation_);
  c.status = ErrorStatus(error.code);
  std::string_view message(error.message);
  message = message.substr(0, kMaxMessageBytes);
  // A message block is lent under the request id, so never under one a live request holds.
  if (!message.empty() && live_.count({c.slot, c.generation, c.sequence}) == 0) {
    Result<shm::Block> block = arena_.Allocate(message.size());
    if (block.ok()) {
      std::memcpy(arena_.Bytes(*block).data(), message.data(), message.size());
      int64_t shape[] = {static_cast<int64_t>(message.size())};
      c.num_tensors = 1;
      c.tensors[0] = shm::MakeTensorRef(slot_, block->offset, message.size(), DType::kU8, shape);
      auto [it, fresh] = lent_.try_emplace({c.slot, c.generation, c.sequence}, block->offset);
      if (!fresh) {
        // A hostile hook host reusing a request id: keep the first block lent, free this one.
        (void)arena_.Free(block->offset);
        c.num_tensors = 0;
      }
    }
  }
  pending_[h].push_back(c);
}

void DispatchLoop::FlushCompletions() {
  for (uint32_t h = 0; h < pending_.size(); ++h) {
    auto& pending = pending_[h];
    while (!pending.empty()) {
      if (!HookhostAlive(h, pending.front().generation)) {
        pending.pop_front();  // Its block is reaped with the dead incarnation's others.
        continue;
      }
      if (completions_[h].TryPush(pending.front()) != shm::RingStatus::kOk) {
        break;
      }
      pending.pop_front();
    }
  }
}

void DispatchLoop::Reap() {
  for (auto it = lent_.begin(); it != lent_.end();) {
    if (!shm::IsCurrent(segment_, it->first.slot, it->first.generation)) {
      (void)arena_.Free(it->second);
      it = lent_.erase(it);
    } else {
      ++it;
    }
  }
}

bool DispatchLoop::HasRingWork() const {
  if (control_.HasWork()) {
    return true;
  }
  // A hook host held back for its completion backlog is no work: the loop must not spin on it.
  for (size_t h = 0; h < submissions_.size(); ++h) {
    if (pending_[h].size() < segment_.ring_capacity() && submissions_[h].HasWork()) {
      return true;
    }
  }
  return false;
}

bool DispatchLoop::HasCompletionSpace() const {
  for (size_t h = 0; h < completions_.size(); ++h) {
    if (!pending_[h].empty() && completions_[h].HasSpace()) {
      return true;
    }
  }
  return false;
}

void DispatchLoop::Sleep() {
  // A full completion ring is waited on like work: the hook host's pop wakes this loop
  // (ring.h), so no short retry timeout is needed.
  int64_t timeout = options_.idle_sleep_ns;
  int spins = options_.spin_iterations;
  if (!inflight_.empty()) {
    int64_t remaining = backend_->ExpectedRemainingNs();
    if (remaining >= 0) {
      // The backend knows when it finishes (sim). A timed sleep can overshoot by tens of
      // microseconds (timer and wake-up latency, more on a VM): within kSpinHorizonNs of the
      // end, keep turning (draining rings) instead.
      constexpr int64_t kSpinHorizonNs = 1'000'000;
      if (remaining < kSpinHorizonNs) {
        return;
      }
      timeout = std::min<int64_t>(timeout, remaining - kSpinHorizonNs / 2);
    } else {
      // The backend rings the doorbell when its queue runs empty. With batches queued behind
      // the running one the execution never waits for the loop, so the loop sleeps until the
      // oldest should be done by its learned cost (at least 50 us) to answer it and refill
      // the queue. It does not spin: a spinning loop takes a core from the execution.
      const Batch& oldest = *inflight_.front();
      int64_t expected = oldest.launched_ns +
                         static_cast<int64_t>(oldest.dispatch.charged_seconds * 1e9) -
                         MonotonicNs();
      timeout = std::min<int64_t>(
          timeout, inflight_.size() > 1 ? std::max<int64_t>(expected, 50'000) : 1'000'000);
      spins = std::min(spins, 100);
    }
  }
  if (quiet_wakes_ > 0 && inflight_.empty()) {
    spins = 0;  // Woken by the heartbeat's timeout with nothing to do: spinning finds nothing.
    if (quiet_wakes_ >= kQuietWakesBeforeRest) {
      timeout = std::max(timeout, options_.rest_sleep_ns);  // Idle: heartbeat less often.
    }
  }
  bool ready = shm::WaitForWork(
      segment_, slot_,
      [this] {
        return HasRingWork() || HasCompletionSpace() || (!inflight_.empty() && backend_->Ready());
      },
      timeout, spins);
  quiet_wakes_ = ready ? 0 : quiet_wakes_ + 1;
}

void DispatchLoop::PublishStatus(shm::ProcessState state) {
  int64_t now = MonotonicNs();
  last_status_ns_ = now;
  shm::StatusSnapshotData& s = *snapshot_;
  std::vector<ModelMetrics> metrics = scheduler_->Metrics(now);
  ControlStatus control = scheduler_->GetControlStatus();
  s.state = static_cast<uint32_t>(state);
  s.generation = generation_;
  s.discipline = static_cast<uint32_t>(control.discipline);
  s.residency_mode = static_cast<uint32_t>(control.residency_mode);
  s.num_models = static_cast<uint32_t>(std::min<size_t>(models_.size(), shm::kMaxStatusModels));
  s.published_ns = now;
  s.device_memory_in_use = backend_->DeviceMemoryInUse();
  s.dispatches = dispatches_;
  s.invalid_descriptors = invalid_;
  s.model_loads = model_loads_;
  s.model_load_failures = model_load_failures_;
  s.model_unloads = model_unloads_;
  s.model_load_seconds = model_load_seconds_;
  s.host_gap_p50_ns = host_gaps_.Percentile(0.5);
  s.host_gap_p99_ns = host_gaps_.Percentile(0.99);
  s.host_gap_samples = host_gaps_.count();
  std::copy(std::begin(tenant_requests_), std::end(tenant_requests_), s.tenant_requests);
  std::copy(std::begin(tenant_compute_seconds_), std::end(tenant_compute_seconds_),
            s.tenant_compute_seconds);
  for (uint32_t i = 0; i < s.num_models; ++i) {
    shm::ModelStatusData& m = s.models[i];
    const ModelMetrics& mm = metrics[i];
    const ModelControlStatus& mc = control.models[i];
    m = shm::ModelStatusData{};
    shm::CopyName(m.name, models_[i].name);
    shm::CopyName(m.wire_batch_input, mc.wire_batch_input);
    m.wire_batch_axis = mc.wire_batch_axis;
    m.state = static_cast<uint32_t>(models_[i].unloaded   ? shm::ModelLoadState::kUnloaded
                                    : models_[i].pipeline ? shm::ModelLoadState::kPipeline
                                    : models_[i].failure  ? shm::ModelLoadState::kFailed
                                                          : shm::ModelLoadState::kReady);
    if (models_[i].failure && !models_[i].pipeline && !models_[i].unloaded) {
      shm::CopyName(m.error, models_[i].failure->ToString());
    }
    m.residency = static_cast<uint32_t>(mc.residency);
    m.loaded = models_[i].failure ? 0 : 1;
    m.weight = mc.weight;
    m.load_seconds = models_[i].load_seconds;
    m.total_compute_seconds = mm.total_compute_seconds;
    m.recent_compute = mm.recent_compute;
    m.queue_depth = mm.queue_depth;
    m.outstanding = outstanding_[i];
    m.dispatch_count = mm.dispatch_count;
    m.requests_served = mm.requests_served;
    m.rows_served = mm.rows_served;
    m.padding_rows = mm.padding_rows;
    m.rejected = mm.rejected;
    m.shed = mm.shed + late_shed_[i];
    m.failed = mm.failed;
    m.cancelled = mm.cancelled;
    m.errors = errors_[i];
    m.queue_wait_p50_ns = mm.queue_wait_p50_ns;
    m.queue_wait_p99_ns = mm.queue_wait_p99_ns;
    for (size_t b = 0; b < shm::kQueueWaitBuckets && b < mm.queue_wait_le.size(); ++b) {
      m.queue_wait_le[b] = mm.queue_wait_le[b];
    }
    m.queue_wait_count = mm.queue_wait_count;
    m.queue_wait_sum_ns = mm.queue_wait_sum_ns;
    for (const auto& [size, dispatches] : mm.batch_size_histogram) {
      for (size_t b = 0; b < shm::kBatchSizeBuckets; ++b) {
        if (size <= shm::kBatchSizeBounds[b]) {
          m.batch_size_le[b] += dispatches;
        }
      }
      m.batch_size_count += dispatches;
      m.batch_size_sum += static_cast<uint64_t>(size) * dispatches;
    }
    m.effective_max_batch = mm.effective_max_batch;
  }
  status_.Publish(s);
}

}  // namespace ferry
