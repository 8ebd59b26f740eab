// Batches: planned from the scheduler's decision, launched, and answered piece by piece.
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
#include "worker/weight_residency.h"

namespace ferry::worker {
namespace {

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
  ApplyWeightControls(decision.controls);
  Dispatch& d = decision.dispatch;
  AnswerShedAndFailed(d);
  if (!d.runs()) {
    return;
  }
  if (options_.residency != nullptr) {
    options_.residency->Touch(d.model);
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
    SequenceTable* table = SequencesOf(r.model);  // Its state inputs are the table's.
    size_t sent = 0;  // The request's own tensors, in manifest order without the states.
    for (size_t i = 0; i < manifest.inputs.size(); ++i) {
      int state = table != nullptr ? table->InputState(i) : -1;
      io.inputs.push_back(state >= 0 ? table->Input({r.descriptor.tenant, r.descriptor.sequence_id},
                                                    id, static_cast<size_t>(state))
                                     : shm::TensorBytes(segment_, r.descriptor.tensors[sent++]));
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
  // A model failed while its batch was planned (its weights could not be loaded).
  Status begun = model.failure      ? Status(*model.failure)
                 : RunsHere(*batch) ? backend_->RunHere(model.handle, batch->job)
                                    : backend_->Begin(model.handle, batch->job);
  if (!begun.ok()) {
    FailBatch(*batch, begun.error());
    spares_.push_back(std::move(batch));
    return;
  }
  batch->launched_ns = begin_ns;
  inflight_.push_back(std::move(batch));
  ++dispatches_;
}

// No finished batch's answers wait behind a batch run here: on the host's CPUs a batch is
// decided only with none in flight, after the last one's completions were pushed (Turn).
bool DispatchLoop::RunsHere(const Batch& batch) const {
  double worst = batch.dispatch.worst_recent_seconds;
  return backend_->RunsOnHostCpus() && inflight_.empty() && worst >= 0 &&
         worst * 1e9 <= static_cast<double>(options_.run_here_max_ns);
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
    auto compute_ns = static_cast<int64_t>(timing->compute_seconds * 1e9);
    int64_t unix_ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count();
    AnswerStats& answers = answers_[static_cast<size_t>(batch->dispatch.model)];
    answers.RecordExecution(batch->dispatch.batch_size, compute_ns);
    for (size_t k = 0; k < batch->members.size(); ++k) {
      uint32_t id = batch->members[k];
      Request& r = requests_[id];
      KeepStates(*batch, k);
      r.succeeded = true;
      double share = timing->compute_seconds * static_cast<double>(r.descriptor.rows) /
                     static_cast<double>(std::max<int64_t>(batch_rows, 1));
      int64_t started = timing->started_ns != 0 ? timing->started_ns : batch->launched_ns;
      flows_.Executed(r.descriptor.tenant, r.descriptor.priority, share, started - r.arrival_ns);
      answers.RecordOk(r.descriptor.rows, now - r.arrival_ns, compute_ns, unix_ms);
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
  // Every output but a stateful model's states (which stay in its sequence).
  c.num_tensors = static_cast<uint16_t>(manifest.request_outputs().size());
  const SequenceTable* table = SequencesOf(r.model);
  const ShapeVariant& variant = manifest.variants[static_cast<size_t>(d.variant)];
  uint64_t offset = r.block;
  size_t answered = 0;
  for (size_t o = 0; o < manifest.outputs.size(); ++o) {
    const TensorSpec& spec = manifest.outputs[o];
    offset = r.block + shm::AlignUp(offset - r.block, shm::kBlockAlignment);
    Shape shape = ConcreteShape(variant.outputs.at(spec.name), spec, d.rows);
    uint64_t bytes = OutputBytes(manifest, o, d.variant, d.rows);
    if (table == nullptr || table->OutputState(o) < 0) {
      c.tensors[answered++] = shm::MakeTensorRef(slot_, offset, bytes, spec.dtype, shape);
    }
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

}  // namespace ferry::worker
