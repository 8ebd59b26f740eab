// The transport thread: worker views, sending pieces, completions, releases and cancels.
#include <pthread.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "common/clock.h"
#include "hookhost/hookhost_impl.h"
#include "hookhost/request_checks.h"
#include "shm/recovery.h"

namespace ferry::hookhost {
namespace {

// What a sequence's worker is hashed by: its id within its tenant.
uint64_t SequenceKey(const Pending& p) {
  return p.sequence_id ^ (uint64_t{p.tenant} << 56 | uint64_t{p.tenant} * 0x9e3779b97f4a7c15ULL);
}

}  // namespace

// --- Transport thread ---
void HookHost::Impl::TransportLoop() {
  while (!stopping.load(std::memory_order_acquire)) {
    if (!TryTakeToken()) {
      std::this_thread::yield();  // A hand-off is being sent: a few microseconds.
      continue;
    }
    int64_t now = MonotonicNs();
    bool busy = TakeHandoff();
    if (now - views_at >= kViewRefreshNs) {
      RefreshViews(now);
    }
    busy |= SendWaiting(now);
    SendCancels();
    busy |= PollCompletions();
    busy |= PushReleases();
    CheckWorkerRestarts();
    RerouteStalled(now);
    CheckCallTimeouts(now);
    ReturnToken();
    if (!busy && options.spin_ns > 0 && pending_count.load(std::memory_order_relaxed) == 1 &&
        shm::SpinUntil([this] { return HasWork(); }, options.spin_ns)) {
      continue;  // The answer of the only request pending, caught without sleeping.
    }
    if (!busy) {
      transport_idle.store(true, std::memory_order_relaxed);
      bool quiet = pending_count.load(std::memory_order_relaxed) == 0;
      shm::WaitForWork(
          segment, slot, [this] { return HasWork(); }, quiet ? kQuietWaitNs : kIdleWaitNs, 200);
      transport_idle.store(false, std::memory_order_relaxed);
    }
  }
}

bool HookHost::Impl::HasWork() {
  if (handoff_waiting.load(std::memory_order_acquire)) {
    return true;
  }
  for (const shm::RingConsumer& c : complete) {
    if (c.HasWork()) {
      return true;
    }
  }
  return false;
}

bool HookHost::Impl::TakeHandoff() {
  handoff_waiting.store(false, std::memory_order_relaxed);
  MutexLock lock(&handoff_mutex);
  bool any = !outbox.empty() || !releases_in.empty() || !cancels_in.empty();
  while (!outbox.empty()) {
    waiting.push_back(std::move(outbox.front()));
    outbox.pop_front();
  }
  while (!cancels_in.empty()) {
    cancels.push_back(std::move(cancels_in.front()));
    cancels_in.pop_front();
  }
  while (!releases_in.empty()) {
    auto& [worker, release] = releases_in.front();
    notices[worker].push_back(release);
    releases_in.pop_front();
  }
  return any;
}

// A descriptor of `kind` for request `sequence` of `model`, from this incarnation.
shm::DescriptorData HookHost::Impl::Addressed(shm::DescriptorKind kind, uint64_t sequence,
                                              size_t model) const {
  shm::DescriptorData d{};
  d.kind = static_cast<uint16_t>(kind);
  d.slot = slot;
  d.generation = generation;
  d.sender_generation = generation;
  d.sequence = sequence;
  d.model = static_cast<uint16_t>(model);
  return d;
}

// A worker's status has not yet been read whole, within options.stale_status_ns of the first
// read.
bool HookHost::Impl::Unseen(int64_t now) const {
  return now - first_view_ns < options.stale_status_ns &&
         std::any_of(workers.begin(), workers.end(),
                     [](const WorkerState& w) { return !w.read_whole; });
}

void HookHost::Impl::RefreshViews(int64_t now) {
  double elapsed = static_cast<double>(now - repacked_at) * 1e-9;
  bool repack = options.gateway == GatewayMode::kLptPacking && now - repacked_at >= kRepackNs;
  std::vector<double> load(models.size(), 0.0);
  views_at = now;
  if (first_view_ns == 0) {
    first_view_ns = now;
  }
  uint64_t partition = segment.partition_bytes();
  for (size_t w = 0; w < workers.size(); ++w) {
    WorkerState& ws = workers[w];
    Result<shm::StatusSnapshotData> st = shm::ReadStatus(segment, ws.slot, 64);
    uint32_t current = segment.generation(ws.slot).load(std::memory_order_acquire);
    // A torn read is no state: the worker is publishing (or was preempted while it did, on a
    // busy host). Its last view stands; one never read whole is waited for (Unseen) rather
    // than taken for not ready, for up to options.stale_status_ns either way: seen torn at
    // every read for that long, the reads no further apart than half of it (a quiet
    // transport's long sleep between two torn reads is no evidence of one long write).
    if (st.ok()) {
      ws.read_whole = true;
      ws.torn_since_ns = 0;
    } else if (ws.torn_since_ns == 0 || now - ws.read_at_ns > options.stale_status_ns / 2) {
      ws.torn_since_ns = now;
    }
    ws.read_at_ns = now;
    bool settling = ws.read_whole ? current == ws.view_generation &&
                                        now - ws.torn_since_ns < options.stale_status_ns
                                  : now - first_view_ns < options.stale_status_ns;
    if (!st.ok() && settling) {
      continue;
    }
    bool ready = st.ok() && st->state == static_cast<uint32_t>(shm::ProcessState::kReady) &&
                 st->generation == current;
    uint64_t beat = shm::ReadHeartbeat(segment, ws.slot);
    if (beat != ws.heartbeat || ws.beat_ns == 0) {
      ws.heartbeat = beat;
      ws.beat_ns = now;
    }
    bool responsive = now - ws.beat_ns < options.stall_ns;
    ws.view_generation = current;
    uint64_t outstanding = 0;
    uint32_t listed = ready ? std::min<uint32_t>(st->num_models, shm::kMaxStatusModels) : 0;
    for (uint32_t m = 0; m < listed; ++m) {
      outstanding += st->models[m].outstanding;
    }
    uint64_t used = segment.accounting(ws.slot).bytes_in_use.load(std::memory_order_relaxed);
    uint64_t arena_free = partition - std::min(partition, used);
    for (size_t m = 0; m < models.size(); ++m) {
      WorkerView& v = views[m][w];
      v = WorkerView{};
      v.ready = ready;
      v.responsive = responsive;
      v.max_queue_depth = m < options.max_queue_depth.size() ? options.max_queue_depth[m] : 1024;
      v.outstanding = outstanding;
      v.arena_free = arena_free;
      if (m < listed) {
        const shm::ModelStatusData& ms = st->models[m];
        std::string_view name(ms.name, strnlen(ms.name, sizeof(ms.name)));
        if (name == models[m].key &&
            ms.state == static_cast<uint32_t>(shm::ModelLoadState::kFailed)) {
          v.failure.assign(ms.error, strnlen(ms.error, sizeof(ms.error)));  // Untrusted text.
        }
        if (name == models[m].key &&
            ms.state == static_cast<uint32_t>(shm::ModelLoadState::kReady)) {
          v.has_model = true;
          v.resident = ms.loaded != 0;
          v.queue_depth = ms.queue_depth;
          if (repack && elapsed > 0) {
            load[m] += std::max(0.0, ms.total_compute_seconds - ws.last_compute[m]) / elapsed;
            ws.last_compute[m] = ms.total_compute_seconds;
          }
        }
      }
    }
  }
  if (repack) {
    gateway.Repack(load, workers.size());
    repacked_at = now;
  }
}

bool HookHost::Impl::SendWaiting(int64_t now) {
  bool sent = false;
  bool unseen = Unseen(now);
  for (auto it = waiting.begin(); it != waiting.end();) {
    PendingPtr p = *it;
    auto drop = [&](std::optional<Error> error) {
      for (Piece& piece : p->pieces) {
        FreeBlocks(piece.input_blocks);
        piece.input_blocks.clear();
      }
      if (error) {
        AnswerLater(p, *error);
      }
      it = waiting.erase(it);
    };
    if (p->answered.load()) {
      drop(std::nullopt);
      continue;
    }
    if (p->parent != nullptr && p->parent->answered.load()) {
      drop(Cancelled("pipeline '" + p->parent->model->name + "' was answered before its call to '" +
                     p->model->name + "' was sent"));
      continue;
    }
    if (p->deadline_ns != 0 && now >= p->deadline_ns) {
      drop(DeadlineExceeded("model '" + p->model->name +
                            "': the deadline passed before a worker could take it"));
      continue;
    }
    size_t model = p->model->index;
    std::vector<WorkerView> candidates = views[model];
    bool ring_full = false;
    for (size_t w = 0; w < candidates.size(); ++w) {
      // Reset since its status was read (died, successor not ready yet): nothing may go to
      // its rings, where no incarnation would answer it.
      if (segment.generation(workers[w].slot).load(std::memory_order_acquire) !=
          workers[w].view_generation) {
        candidates[w].ready = false;
      }
      if (candidates[w].has_model && submit[w].Space() < p->pieces.size()) {
        candidates[w].has_model = false;  // Its ring is full: not now.
        ring_full = true;
      }
    }
    Result<size_t> chosen =
        p->sequence_id != 0
            ? Gateway::ChooseForSequence(p->model->name, SequenceKey(*p), p->output_bytes,
                                         candidates, worker_slots)
            : gateway.Choose(static_cast<int>(model), p->model->name, p->output_bytes, candidates);
    if (!chosen.ok()) {
      bool unavailable = chosen.error().code == ErrorCode::kUnavailable;
      if (unavailable && views_at < p->start_ns) {
        // Views read before the request arrived may predate a worker's readiness (which a
        // client may have seen, through ferryd, within the refresh interval): refused only
        // on a view read since. The fresh clock is past start_ns, so this repeats once.
        RefreshViews(MonotonicNs());
        continue;
      }
      // UNAVAILABLE (none ready, or none ready has the model) may only mean a worker not yet
      // seen; RESOURCE_EXHAUSTED is a full queue or arena, answered as such.
      if (ring_full || (unseen && unavailable)) {
        ++it;  // Waits for ring space, or a first whole status (or its deadline).
      } else {
        drop(chosen.error());
      }
      continue;
    }
    size_t w = *chosen;
    p->worker = w;
    CountPlacement(model, candidates[w].resident);
    for (size_t i = 0; i < p->pieces.size(); ++i) {
      Piece& piece = p->pieces[i];
      piece.sequence = next_sequence++;
      shm::DescriptorData d = Addressed(shm::DescriptorKind::kSubmit, piece.sequence, model);
      d.variant = p->variant;
      d.rows = static_cast<int32_t>(piece.rows);
      d.deadline_ns = p->deadline_ns;
      d.meta = p->meta;
      d.priority = p->priority;
      d.tenant = static_cast<uint16_t>(p->tenant);
      d.trace_id_high = p->trace_high;
      d.trace_id_low = p->trace_low;
      d.sequence_id = p->sequence_id;
      d.sequence_flags = p->sequence_flags;
      d.num_tensors = static_cast<uint8_t>(piece.tensors.size());
      std::copy(piece.tensors.begin(), piece.tensors.end(), d.tensors);
      inflight[piece.sequence] = {p, i};
      // Space was checked and this thread is the ring's only producer.
      (void)submit[w].TryPush(d);
    }
    for (size_t m = 0; m < views.size(); ++m) {
      views[m][w].outstanding += p->pieces.size();
    }
    views[model][w].queue_depth += p->pieces.size();
    sent = true;
    it = waiting.erase(it);
  }
  return sent;
}

void HookHost::Impl::CountPlacement(size_t model, bool resident) {
  if (model < shm::kMaxStatusModels) {
    counters.placements[model][resident ? 1 : 0].fetch_add(1, std::memory_order_relaxed);
  }
}

void HookHost::Impl::Cancel(const PendingPtr& p) {
  if (p->answered.load()) {
    return;
  }
  Answer(p, Cancelled("model '" + p->model->name + "': the client left; request cancelled"), 0);
  {
    MutexLock lock(&handoff_mutex);
    if (handoff_closed) {
      return;  // Stopping: every worker answers (or drops) what it holds anyway.
    }
    cancels_in.push_back(p);
  }
  WakeTransport();
}

void HookHost::Impl::SendCancels() {
  if (cancels.empty()) {
    return;
  }
  // Only what this thread owns is read: `inflight` (a cancelled request's own pieces may still
  // be being made on a hook thread). One pass for every cancel taken together.
  std::unordered_set<const Pending*> cancelled;
  for (const PendingPtr& p : cancels) {
    cancelled.insert(p.get());
  }
  for (const auto& [sequence, entry] : inflight) {
    const Pending& q = *entry.first;
    if (cancelled.count(&q) == 0 && (q.parent == nullptr || cancelled.count(q.parent.get()) == 0)) {
      continue;  // Neither cancelled nor a model call of a cancelled pipeline.
    }
    notices[q.worker].push_back(Addressed(shm::DescriptorKind::kCancel, sequence, q.model->index));
  }
  cancels.clear();
}

bool HookHost::Impl::PollCompletions() {
  bool any = false;
  for (size_t w = 0; w < workers.size(); ++w) {
    shm::DescriptorRules rules{
        slot, 0, {workers[w].slot}, segment.partition_bytes(), shm::kCompletionRingKinds};
    shm::DescriptorData d{};
    for (uint32_t n = 0;
         n < segment.ring_capacity() && complete[w].TryPop(&d) == shm::RingStatus::kOk; ++n) {
      any = true;
      if (abandoned[w].erase(d.sequence) != 0) {
        // Answered after it was sent elsewhere: its blocks go back unread.
        if (shm::ValidateDescriptor(d, rules).ok() && d.generation == generation) {
          shm::DescriptorData release = d;
          release.kind = static_cast<uint16_t>(shm::DescriptorKind::kRelease);
          release.num_tensors = 0;
          release.sender_generation = generation;
          notices[w].push_back(release);
        }
        continue;
      }
      auto it = inflight.find(d.sequence);
      if (!shm::ValidateDescriptor(d, rules).ok() || d.generation != generation ||
          it == inflight.end() || it->second.first->worker != w) {
        complete[w].CountInvalid();
        continue;
      }
      auto [p, i] = it->second;
      inflight.erase(it);
      Piece& piece = p->pieces[i];
      piece.completion = d;
      if (d.status != 0) {
        // A status no code has (a hostile worker's) is INTERNAL.
        auto code = d.status - 1 <= static_cast<uint32_t>(kLastErrorCode)
                        ? static_cast<ErrorCode>(d.status - 1)
                        : ErrorCode::kInternal;
        std::string message = "the worker gave no reason";
        if (d.num_tensors == 1 && d.tensors[0].dtype == static_cast<uint16_t>(DType::kU8)) {
          std::span<uint8_t> bytes = shm::TensorBytes(segment, d.tensors[0]);
          message.assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
          if (!shm::StillCurrent(segment, workers[w].slot, d.sender_generation)) {
            message = "the worker restarted";
          }
        }
        piece.error = Error{code, message};
      } else {
        p->timings.queue_ns = std::max<int64_t>(p->timings.queue_ns, d.timing.queue_us * 1000LL);
        p->timings.compute_ns += d.timing.compute_us * 1000LL;
        p->timings.batch_size = std::max<int64_t>(p->timings.batch_size, d.batch_size);
      }
      CompletePiece(p, piece);
    }
  }
  return any;
}

void HookHost::Impl::CompletePiece(const PendingPtr& p, Piece& piece) {
  FreeBlocks(piece.input_blocks);  // The worker has finished reading them.
  piece.input_blocks.clear();
  if (--p->pieces_left == 0) {
    // No plugin runs and the answer is small: joined and answered here, a hand-off to a hook
    // thread fewer (a model call must be: its run may be waiting on every hook thread).
    const HookModel& model = *p->model;
    bool small = p->output_bytes * p->pieces.size() <= kInlineAnswerBytes &&
                 (model.plugin == nullptr || !model.plugin->has_postprocess());
    if (p->subcall || small) {
      Finish(p);
    } else {
      Post([this, p] { Finish(p); });
    }
  }
}

bool HookHost::Impl::PushReleases() {
  bool any = false;
  for (size_t w = 0; w < workers.size(); ++w) {
    while (!notices[w].empty() && submit[w].TryPush(notices[w].front()) == shm::RingStatus::kOk) {
      notices[w].pop_front();
      any = true;
    }
  }
  return any;
}

void HookHost::Impl::CheckWorkerRestarts() {
  for (size_t w = 0; w < workers.size(); ++w) {
    uint32_t current = segment.generation(workers[w].slot).load(std::memory_order_acquire);
    if (current == workers[w].generation) {
      continue;
    }
    workers[w].generation = current;
    notices[w].clear();  // The successor lent this hook host nothing and queued nothing of it.
    abandoned[w].clear();
    for (auto it = inflight.begin(); it != inflight.end();) {
      auto [p, i] = it->second;
      if (p->worker != w) {
        ++it;
        continue;
      }
      Piece& piece = p->pieces[i];
      piece.error = Unavailable("model '" + p->model->name + "': worker slot " +
                                std::to_string(workers[w].slot) +
                                " was lost while the request was in flight");
      piece.completion = {};  // Nothing to release.
      it = inflight.erase(it);
      CompletePiece(p, piece);
    }
  }
}

void HookHost::Impl::RerouteStalled(int64_t now) {
  for (size_t w = 0; w < workers.size(); ++w) {
    const WorkerState& ws = workers[w];
    if (ws.beat_ns == 0 || now - ws.beat_ns < options.stall_ns) {
      continue;
    }
    for (std::vector<WorkerView>& model_views : views) {
      model_views[w].responsive = false;  // Now, not at the next refresh: none goes back to it.
    }
    // The requests at `w`, with their pieces still unanswered there.
    std::unordered_map<Pending*, std::vector<uint64_t>> held;
    for (const auto& [sequence, entry] : inflight) {
      if (entry.first->worker == w) {
        held[entry.first.get()].push_back(sequence);
      }
    }
    int sent_again = 0;
    for (auto& [raw, sequences] : held) {
      PendingPtr p = inflight.at(sequences.front()).first;
      size_t model = p->model->index;
      bool elsewhere = false;
      for (size_t other = 0; other < workers.size(); ++other) {
        const WorkerView& v = views[model][other];
        elsewhere |= other != w && v.ready && v.responsive && v.has_model;
      }
      // Only whole requests: one with a piece answered stays (its answer is being joined).
      // A sequence's request stays with its state.
      if (!elsewhere || p->sequence_id != 0 || p->reroutes >= kMaxReroutes ||
          sequences.size() != p->pieces.size() || p->answered.load()) {
        continue;
      }
      for (uint64_t sequence : sequences) {
        notices[w].push_back(Addressed(shm::DescriptorKind::kCancel, sequence, model));
        abandoned[w].insert(sequence);
        inflight.erase(sequence);
      }
      ++p->reroutes;
      waiting.push_front(p);
      ++sent_again;
    }
    if (sent_again > 0) {
      spdlog::warn("hook host slot {}: worker slot {} silent for {} ms; {} request(s) sent again",
                   slot, ws.slot, (now - ws.beat_ns) / 1'000'000, sent_again);
    }
  }
}

}  // namespace ferry::hookhost
