// The dispatch loop's turn: rings in, plan, launch, answers out; sleep, health, status.
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
#include "worker/weight_residency.h"

namespace ferry::worker {

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
  FailSequenced(gone);
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
    FailSequenced(gone);  // The next requests of the sequences just answered.
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
  PromoteSequences(MonotonicNs());
  FlushCompletions();
  if (unhealthy_) {
    return false;
  }
  ApplyModelChanges();
  TurnResidency();
  int64_t now = MonotonicNs();
  for (uint32_t h = 0; h < submissions_.size(); ++h) {
    DrainSubmissions(h, now);
  }
  PromoteSequences(now);
  // Decide the next batch while fewer than max(2, MaxInFlight) are decided and unfinished
  // (one ahead of the execution, or as deep as the backend queues), then begin it if the
  // backend has room; on the host's CPUs only once the execution is idle (dispatch_loop.h).
  size_t decided = inflight_.size() + (planned_ != nullptr ? 1 : 0);
  bool may_plan = inflight_.empty() || (options_.plan_ahead && !backend_->RunsOnHostCpus() &&
                                        decided < static_cast<size_t>(std::max(2, max_in_flight_)));
  if (!stopping_ && planned_ == nullptr && may_plan &&
      (inflight_.empty() || scheduler_->queued_requests() > 0)) {
    Plan(now);
  }
  if (!stopping_ && planned_ != nullptr && !ModelChangeReady() &&
      static_cast<int>(inflight_.size()) < max_in_flight_) {
    Launch();
  }
  PromoteSequences(now);  // After requests dropped or shed while planning and launching.
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
  // Work queued only for models whose weights are loading waits for the loader's doorbell.
  if (!work_left || !inflight_.empty() || HasPendingCompletions() ||
      (planned_ == nullptr && !scheduler_->HasRunnable())) {
    Sleep();
  }
  return true;
}

void DispatchLoop::CheckHealth() {
  if (!unhealthy_ && !backend_->Healthy()) {
    unhealthy_ = true;
    spdlog::error("worker slot {}: backend unhealthy; exiting for a restart", slot_);
  }
}

void DispatchLoop::Reap() {
  for (const std::unique_ptr<SequenceTable>& table : sequences_) {
    if (table != nullptr) {
      table->Expire(MonotonicNs());
    }
  }
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
  // What wakes the loop besides a peer's ring work: a control message, a batch finished, a
  // load finished, or room in a full completion ring (the hook host's pop wakes a loop that
  // waits on every peer, ring.h, so no short retry timeout is needed).
  auto own = [this] {
    return control_.HasWork() || HasCompletionSpace() ||
           (!inflight_.empty() && backend_->Ready()) ||
           (options_.residency != nullptr && options_.residency->LoadFinished());
  };
  auto woken = [this, &own] { return own() || HasRingWork(); };
  // Just idle after work (not after a quiet wake: an idle loop never polls): the next request
  // of a client at light load follows within microseconds, sooner than a sleep and wake-up.
  if (options_.spin_ns > 0 && quiet_wakes_ == 0 && inflight_.empty() && planned_ == nullptr &&
      scheduler_->queued_requests() == 0 && shm::SpinUntil(woken, options_.spin_ns)) {
    return;
  }
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
  if (options_.residency != nullptr) {  // A cold load held back by max_load_fraction.
    int64_t delay = options_.residency->LoadDelayNs(MonotonicNs());
    if (delay > 0) {
      timeout = std::min(timeout, delay);
    }
  }
  if (quiet_wakes_ > 0 && inflight_.empty()) {
    spins = 0;  // Woken by the heartbeat's timeout with nothing to do: spinning finds nothing.
    if (quiet_wakes_ >= kQuietWakesBeforeRest) {
      timeout = std::max(timeout, options_.rest_sleep_ns);  // Idle: heartbeat less often.
    }
  }
  // A batch on the host's CPUs: nothing can be decided before it ends (no planning ahead
  // there), so a request that arrives meanwhile does not wake the loop. It waits in its ring
  // for the batch's doorbell, a control message or the timeout (at most 1 ms while a batch
  // executes), whichever comes first, saving the loop a wake-up per arrival.
  bool ready =
      backend_->RunsOnHostCpus() && !inflight_.empty()
          ? shm::WaitForWork(segment_, slot_, own, timeout, spins, shm::WakeOn::kOwnAndSupervisor)
          : shm::WaitForWork(segment_, slot_, woken, timeout, spins);
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
  if (options_.residency != nullptr) {
    s.weight_budget_bytes = options_.residency->budget();
    s.weight_resident_bytes = options_.residency->resident_bytes();
  }
  s.model_load_seconds = model_load_seconds_;
  s.host_gap_p50_ns = host_gaps_.Percentile(0.5);
  s.host_gap_p99_ns = host_gaps_.Percentile(0.99);
  s.host_gap_samples = host_gaps_.count();
  flows_.Fill(s);
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
    if (options_.residency != nullptr) {
      const ResidencyCounters& r = options_.residency->counters(static_cast<int>(i));
      m.loaded = models_[i].failure || !options_.residency->resident(static_cast<int>(i)) ? 0 : 1;
      m.weight_bytes = r.bytes;
      m.weight_loads = r.loads;
      m.weight_evictions = r.evictions;
      m.weight_load_seconds = r.load_seconds;
      m.last_weight_load_ns = r.last_load_ns;
    }
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
    if (sequences_[i] != nullptr) {
      m.live_sequences = sequences_[i]->live();
      m.max_sequences = static_cast<uint64_t>(models_[i].bundle->manifest.sequence.max_sequences);
    }
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
    m.answers = answers_[i].data();
  }
  status_.Publish(s);
}

}  // namespace ferry::worker
