// Requests from the submission rings: checked against their model, queued, cancelled.
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
#include "worker/dispatch_loop.h"

namespace ferry::worker {
namespace {

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

}  // namespace

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
  const std::vector<TensorSpec>& inputs = manifest.request_inputs();
  if (d.num_tensors != inputs.size()) {
    return InvalidArgument(where() + "expected " + std::to_string(inputs.size()) +
                           " input tensors, got " + std::to_string(d.num_tensors));
  }
  if (manifest.unbatched() && d.rows != 1) {
    return InvalidArgument(where() + "an unbatched model takes one row per request");
  }
  const ShapeVariant& variant = manifest.variants[static_cast<size_t>(d.variant)];
  for (size_t i = 0; i < inputs.size(); ++i) {
    const TensorSpec& spec = inputs[i];
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
  auto refuse = [&](const Error& error) {  // Counted as failed, with no time spent here.
    answers_[d.model].RecordFailed(0);
    CompleteError(h, d, error);
  };
  if (state_ == shm::ProcessState::kDraining) {
    refuse(Unavailable("worker slot " + std::to_string(slot_) + " is draining"));
    return;
  }
  if (model.failure) {
    refuse(*model.failure);
    return;
  }
  Status inputs = CheckInputs(model, d);
  if (!inputs.ok()) {
    refuse(inputs.error());
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
  requests_[id].arrival_ns = std::max(now, last_arrival_ns_ + 1);
  Result<bool> run = ArriveInSequence(id, now);
  if (!run.ok()) {
    FreeRequest(id);  // First: the id must not be live for the message block to be lent.
    refuse(run.error());
    return;
  }
  Status queued = *run ? Enqueue(id, now) : OkStatus();
  if (!queued.ok()) {
    FreeRequest(id);
    refuse(queued.error());
    return;
  }
  ++outstanding_[d.model];
}

Status DispatchLoop::Enqueue(uint32_t id, int64_t now) {
  const shm::DescriptorData& d = requests_[id].descriptor;
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
  if (d.deadline_ns != 0) {
    q.deadline = d.deadline_ns;
  }
  // A pipeline's committed call jumps the scan, one per pipeline run; a second call of the
  // same run queued meanwhile (a pipeline calling models at once) waits like new work.
  uint64_t meta = uint64_t{d.slot} << 48 | uint64_t{d.generation & 0xffff} << 32 | d.meta;
  if (d.meta != 0 && !scheduler_->CommittedPending(meta)) {
    q.meta_id = meta;
    return scheduler_->EnqueueCommitted(static_cast<int>(d.model), q);
  }
  return scheduler_->Enqueue(static_cast<int>(d.model), q);
}

void DispatchLoop::Cancel(uint32_t h, const shm::DescriptorData& d) {
  auto it = live_.find({d.slot, d.generation, d.sequence});
  if (it == live_.end()) {
    return;  // Answered already (or never submitted): nothing to take back.
  }
  uint32_t id = it->second;
  const Request& r = requests_[id];
  // The request id is the sender's, but the model must be the one it was queued under.
  if (r.hookhost != h || r.model != static_cast<int>(d.model) ||
      (r.role != Request::Role::kHeld && r.role != Request::Role::kPromoting &&
       !scheduler_->Cancel(r.model, id))) {
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
  r.role = Request::Role::kNone;
  r.succeeded = false;
  live_.emplace(RequestKey{d.slot, d.generation, d.sequence}, id);
  flows_.Arrived(d.tenant, d.priority);
  return id;
}

void DispatchLoop::FailRequest(uint32_t id, const Error& error) {
  Request& r = requests_[id];
  // The id leaves the live set first, so the error's message block may be lent under it.
  live_.erase({r.descriptor.slot, r.descriptor.generation, r.descriptor.sequence});
  CompleteError(r.hookhost, r.descriptor, error);
  answers_[static_cast<size_t>(r.model)].RecordFailed(MonotonicNs() - r.arrival_ns);
  Answered(r.model);
  FreeRequest(id);
}

void DispatchLoop::FreeRequest(uint32_t id) {
  Request& r = requests_[id];
  live_.erase({r.descriptor.slot, r.descriptor.generation, r.descriptor.sequence});
  flows_.Left(r.descriptor.tenant, r.descriptor.priority);
  if (r.role != Request::Role::kNone) {
    LeaveSequence(id);
  }
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

}  // namespace ferry::worker
