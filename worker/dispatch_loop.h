// DESIGN: the worker's dispatch loop: one thread that turns descriptors on its submission
// rings into executed, completed requests (DESIGN.md, One request end to end, step 3).
//
// Each turn, in this order:
//   1. the control ring (set_policy, set_residency, compact, set_discipline, drain, stop);
//   2. every submission ring: a release frees a completion's output block; a submission is
//      validated (descriptor, then tensors against the manifest) and queued, or answered at
//      once with an error completion naming the cause (invalid, queue full, model failed,
//      draining);
//   3. the batch in flight, if it finished: its completions, then Scheduler::Complete with
//      the measured compute time;
//   4. Scheduler::Next plans a batch: requests shed or failed are answered at once
//      (DEADLINE_EXCEEDED / the error), requests of a hook host that died are dropped before
//      any GPU work, output blocks are allocated in the worker's own arena; the batch is begun
//      on the backend when it has room (Backend::MaxInFlight). While a batch executes the
//      loop keeps draining rings and decides the next one, so host work overlaps execution;
//      at most max(2, MaxInFlight) batches are decided and unfinished at a time. A finished batch's
//      successor is begun before the finished one's completions are written.
//      Planning ahead: not where batches run on the host's own CPUs (Backend::RunsOnHostCpus).
//      There a batch decided ahead is formed too early: it holds the one or two requests
//      that had come, and those arriving while the running batch computes wait for a batch
//      after it. Decided when the execution is idle instead, the next batch takes every
//      request queued by then, and the short gap before it begins costs no capacity: those
//      CPUs serve the hook hosts and clients meanwhile. (Measured: docs/benchmarks.md, "Where
//      the CPU goes".) A device (CUDA) or the simulated one keeps the batch ahead, so it
//      never waits for the loop. There a batch known to be short also runs on the loop's own
//      thread (DispatchLoopOptions::run_here_max_ns), saving two wake-ups per batch.
//   5. completions are pushed (a full ring keeps them in a local backlog), and the heartbeat
//      and, every status_interval, the status snapshot (shm/status.h) are published.
// It sleeps on its doorbell only when every ring and queue is empty; a batch finishing wakes
// it through the same doorbell (Backend::SetNotifier).
//
// Inputs are read in place from the submitting hook host's arena and outputs written
// straight into blocks of the worker's arena (one block per request, each output 256-byte
// aligned in it); an error completion carries its message as a U8 tensor in such a block.
// The hook host releases every completion's block; blocks lent to a hook host incarnation
// that died are reaped.
//
// Thread safety: one thread (the loop's) calls everything; the backend's notifier may run on
// another thread and only rings the doorbell.
// Process safety: see shm/layout.h; every descriptor is untrusted.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/poll.h"
#include "shm/arena.h"
#include "shm/descriptor.h"
#include "shm/ring.h"
#include "shm/status.h"
#include "worker/answer_stats.h"
#include "worker/backends/backend.h"
#include "worker/flow_stats.h"
#include "worker/scheduler/scheduler.h"
#include "worker/scheduler/wait_histogram.h"
#include "worker/sequence_table.h"

namespace ferry::worker {

class WeightResidency;

struct LoopModel {
  std::string name;
  const Bundle* bundle = nullptr;  // Null when the model failed to load.
  ModelHandle handle = -1;
  std::optional<Error> failure;  // Requests to a failed model get this error at once.
  bool pipeline = false;         // A pipeline (failure says it runs in the hook hosts).
  bool unloaded = false;         // Unloaded (failure: NOT_FOUND); its queued requests still run.
  double load_seconds = 0;       // How long the backend took to load it (handle >= 0).
};

// A model loaded into a running worker (ferryctl load): its loop entry, its scheduler spec and
// the bundle both point into (owned by the loop from then on). A bundle or backend failure is
// a model with `failure` set: its index is taken all the same.
struct LoadedModel {
  LoopModel model;
  ModelSpec spec;
  std::unique_ptr<Bundle> bundle;
};
using ModelLoader = std::function<LoadedModel(const std::string& name)>;

struct DispatchLoopOptions {
  int64_t status_interval_ns = 5'000'000;  // Status snapshot and reaping period.
  int64_t idle_sleep_ns = 20'000'000;      // Longest doorbell sleep (the heartbeat's period).
  // After kQuietWakesBeforeRest such sleeps in a row with nothing to do: the heartbeat's and
  // status's period while the worker idles (work, a control message or a completion's room
  // still wakes it at once).
  int64_t rest_sleep_ns = 100'000'000;
  // Ring checks before sleeping (at most 100 while a batch executes); the worker process takes
  // RingChecksFor(its poll) (common/poll.h): none where it does not poll.
  int spin_iterations = kPollingRingChecks;
  // With nothing in flight or queued after work, how long the loop polls its rings before it
  // sleeps (a request that follows at once is then taken without a wake-up); 0: never.
  int64_t spin_ns = 0;
  // Plan batch k+1 while batch k executes (where the backend does not run on the host's
  // CPUs).
  bool plan_ahead = true;
  // On the host's CPUs, a batch whose slowest recent run at its size took at most this runs on
  // the loop's own thread (Backend::RunHere). The loop would only sleep through it, waking at
  // most each millisecond, and the hand-off to the execution thread and back costs two
  // wake-ups per batch (docs/benchmarks.md). Longer batches, and any before the first run at
  // their size, go to the execution thread, so control messages and the heartbeat wait at
  // most about this long. 0: never.
  int64_t run_here_max_ns = 1'000'000;
  ModelLoader loader;  // For kLoadModel; null: loads are refused.
  // The worker's weight budget (weight_residency.h), when it has one: outlives the loop.
  WeightResidency* residency = nullptr;
};

class DispatchLoop {
 public:
  // REQUIRES: `worker_slot` is a worker slot of `segment` owned by this process, with its
  // partition free; models[i] is the scheduler's model i; backend and scheduler outlive the
  // loop.
  DispatchLoop(const shm::Segment& segment, uint32_t worker_slot, Backend* backend,
               Scheduler* scheduler, std::vector<LoopModel> models,
               DispatchLoopOptions options = {});
  DispatchLoop(const DispatchLoop&) = delete;
  DispatchLoop& operator=(const DispatchLoop&) = delete;

  // Serves until stopped or drained. Returns the process exit code: 0 after stop or drain,
  // 3 when the backend became unhealthy (a sticky CUDA error).
  int Run();
  // Publishes the status snapshot now with `state` (e.g. kStarting before warm-up).
  void PublishStatus(shm::ProcessState state);

 private:
  struct Request {
    uint32_t hookhost = 0;
    int model = -1;
    shm::DescriptorData descriptor{};  // The validated private copy.
    uint64_t block = 0;                // Output block offset, once allocated.
    bool has_block = false;
    int64_t arrival_ns = 0;  // When it was drained from its ring (queue time starts).
    // A stateful model's request: its sequence's current one (queued or executing), current
    // but not yet handed to the scheduler (in promote_), or held behind the current one.
    enum class Role : uint8_t { kNone, kCurrent, kPromoting, kHeld } role = Role::kNone;
    bool succeeded = false;  // Ran and answered OK (a sequence's state was kept).
  };
  struct Batch {
    Dispatch dispatch;
    BatchJob job;
    std::vector<uint32_t> members;  // Request ids, one per job request.
    int64_t launched_ns = 0;
  };
  struct RequestKey {
    uint32_t slot, generation;
    uint64_t sequence;
    bool operator==(const RequestKey&) const = default;
  };
  struct KeyHash {
    size_t operator()(const RequestKey& k) const {
      return std::hash<uint64_t>()(k.sequence * 0x9e3779b97f4a7c15ULL ^
                                   (uint64_t{k.slot} << 32 | k.generation));
    }
  };

  // One turn (see the file comment). False once the loop is finished.
  bool Turn();
  // After the last turn: finishes every batch begun, answers it, the planned batch and every
  // queued request (UNAVAILABLE), and flushes completions for a bounded while.
  void Shutdown();
  bool HasPendingCompletions() const;
  void AnswerShedAndFailed(const Dispatch& d);
  bool DrainControl();
  // Model table changes (kLoadModel, kUnloadModel). A load, and freeing an unloaded model's
  // executables once nothing of it is queued or executing, wait for the backend to be idle:
  // no batch is begun meanwhile (the backend's model table is not safe to change under a
  // running batch).
  bool ModelChangeReady() const;
  void ApplyModelChanges();
  // Loads `name` (options_.loader) with the heartbeat going meanwhile, then AddModel.
  void LoadModel(const std::string& name);
  // Takes a loaded model at the next index and warms it up (warm_up.h). REQUIRES: no batch in
  // flight.
  void AddModel(LoadedModel loaded);
  void UnloadModel(uint32_t index);
  // Counts `model`'s load (its backend handle) or failed load in the load events.
  void CountLoad(const LoopModel& model);
  void DrainSubmissions(uint32_t h, int64_t now);
  void Submit(uint32_t h, const shm::DescriptorData& d, int64_t now);
  // A hook host's kCancel: the request leaves its queue and is answered CANCELLED, if it is
  // still queued; otherwise nothing happens (it runs, or was answered).
  void Cancel(uint32_t h, const shm::DescriptorData& d);
  Status CheckInputs(const LoopModel& model, const shm::DescriptorData& d) const;
  // The scheduler takes request `id` (its arrival order now).
  Status Enqueue(uint32_t id, int64_t now);
  // Sequences (sequence_table.h): a stateful model's table, or null.
  SequenceTable* SequencesOf(int model) const;
  // A request's sequence rules against its model; then it is the sequence's current request
  // (true: hand it to the scheduler) or held behind it (false).
  Result<bool> ArriveInSequence(uint32_t id, int64_t now);
  // Hands the requests whose turn came to the scheduler and fails those orphaned by an end.
  void PromoteSequences(int64_t now);
  // Request `id` leaves its sequence (FreeRequest): taken out of the held ones, or, as the
  // current one, its successor marked kPromoting for PromoteSequences, orphans noted.
  void LeaveSequence(uint32_t id);
  // The worker stopping: every request held or about to be promoted is answered `error`.
  void FailSequenced(const Error& error);
  // A sequenced request of batch `k` ran: its state outputs become its sequence's state.
  void KeepStates(const Batch& batch, size_t k);
  void Plan(int64_t now);
  void Launch();
  // True when `batch` runs on this thread (DispatchLoopOptions::run_here_max_ns).
  bool RunsHere(const Batch& batch) const;
  // Takes the oldest batch's result from the backend; AnswerBatch then completes its requests
  // (after the next batch is launched, so completions overlap execution).
  std::unique_ptr<Batch> FinishBatch(Result<ExecutionTiming>* timing);
  void AnswerBatch(std::unique_ptr<Batch> batch, const Result<ExecutionTiming>& timing);
  std::unique_ptr<Batch> TakeSpare();
  void FailBatch(Batch& batch, const Error& error);
  void CheckHealth();  // Marks the loop unhealthy (it then exits 3) after a sticky fault.
  // The weight budget's turn (options_.residency): releases, cold loads, and models that
  // cannot be made resident failed with the reason.
  void TurnResidency();
  // Carries out the control changes a decision applied that touch weights.
  void ApplyWeightControls(const std::vector<SchedulerChange>& controls);
  // A batch of `model` is planned or executing.
  bool ModelBusy(int model) const;
  void FlushCompletions();
  void Reap();
  void Sleep();
  bool HasRingWork() const;
  // A hook host has completions waiting locally and its completion ring has room again.
  bool HasCompletionSpace() const;

  uint32_t NewRequest(uint32_t h, int model, const shm::DescriptorData& d);
  void FreeRequest(uint32_t id);
  // Answers request `id` with `error` and frees it.
  void FailRequest(uint32_t id, const Error& error);
  bool HookhostAlive(uint32_t h, uint32_t generation) const;
  // Queues a completion for `d`'s request id: OK with the request's outputs, or an error
  // whose message travels as a U8 tensor.
  // `batch` ran it; `timing` is its measured execution (both go into the completion).
  void CompleteOk(const Request& request, const Batch& batch, const ExecutionTiming& timing);
  // The message block is lent under the request id, so it is left out when that id is live
  // or lent already (a refused duplicate): the code alone then.
  void CompleteError(uint32_t h, const shm::DescriptorData& d, const Error& error);
  void Answered(int model);  // A request of `model` left the worker.

  const shm::Segment& segment_;
  uint32_t slot_;
  uint32_t generation_;
  Backend* backend_;
  Scheduler* scheduler_;
  std::vector<LoopModel> models_;
  DispatchLoopOptions options_;
  shm::Arena arena_;
  shm::StatusWriter status_;
  shm::RingConsumer control_;
  std::vector<shm::RingConsumer> submissions_;
  std::vector<shm::RingProducer> completions_;
  std::vector<std::deque<shm::DescriptorData>> pending_;  // Completions awaiting ring space.
  std::vector<shm::DescriptorRules> submit_rules_, release_rules_;

  std::vector<Request> requests_;  // Indexed by request id (QueuedRequest::payload).
  std::vector<uint32_t> free_ids_;
  std::unordered_map<RequestKey, uint64_t, KeyHash> lent_;  // Completion blocks not released.
  std::unordered_map<RequestKey, uint32_t, KeyHash> live_;  // Queued or executing -> id.
  std::vector<uint64_t> outstanding_;                       // Per model: queued or executing.
  std::vector<uint64_t> errors_;                            // Per model: backend errors.
  std::vector<uint64_t> late_shed_;   // Per model: deadline passed between planning and launch.
  std::vector<AnswerStats> answers_;  // Per model: what was answered (Triton's statistics).
  std::vector<std::unique_ptr<SequenceTable>> sequences_;  // Per model: null when stateless.
  // Requests whose sequence turn came (to the scheduler next) and requests orphaned by an
  // end (to fail): filled as requests leave, emptied by PromoteSequences.
  std::vector<uint32_t> promote_;
  std::vector<std::pair<uint32_t, bool>> orphans_;  // And whether a start (not an end) failed.
  FlowStats flows_;                // Per tenant and level: held, executed, compute, queue waits.
  std::deque<std::string> loads_;  // Loads decoded, not yet applied (in index order).
  std::vector<uint32_t> unloads_;  // Unloaded models whose executables are not freed yet.
  std::vector<uint32_t> unload_after_load_;              // Unloads of indices still in loads_.
  std::vector<std::unique_ptr<Bundle>> loaded_bundles_;  // Of the models loaded while running.

  // Batches begun on the backend and not yet finished, oldest first (at most MaxInFlight),
  // the batch decided next, and spares whose vectors are reused.
  std::deque<std::unique_ptr<Batch>> inflight_;
  std::unique_ptr<Batch> planned_;
  std::vector<std::unique_ptr<Batch>> spares_;
  int max_in_flight_ = 1;
  bool backlog_at_finish_ = false;  // Work was decided or queued when the last batch ended.
  int64_t last_finished_ns_ = 0;
  int64_t last_arrival_ns_ = 0;  // Strictly increasing: the order requests were drained.
  WaitHistogram host_gaps_;
  uint64_t dispatches_ = 0;
  uint64_t invalid_ = 0;
  // Weight load events (shm::StatusSnapshotData): counted as models are loaded and freed.
  uint64_t model_loads_ = 0;
  uint64_t model_load_failures_ = 0;
  uint64_t model_unloads_ = 0;
  double model_load_seconds_ = 0;

  shm::ProcessState state_ = shm::ProcessState::kStarting;
  bool stopping_ = false;
  bool unhealthy_ = false;
  int64_t last_status_ns_ = 0;
  int quiet_wakes_ = 0;  // Sleeps in a row that ended by their timeout, not by work.
  static constexpr int kQuietWakesBeforeRest = 5;
  std::unique_ptr<shm::StatusSnapshotData> snapshot_;  // 40 KiB: kept off the stack.
};

}  // namespace ferry::worker
