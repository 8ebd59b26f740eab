// The hook host's inner state (HookHost::Impl), shared by the files that implement it:
// hookhost.cc (answers and hand-offs, the public HookHost), hook_threads.cc (the hook-thread
// pool and the plugin-call watchdog), request_pieces.cc (preprocess, splitting into pieces,
// joining and postprocess), pipelines.cc (pipeline runs and their model calls) and
// transport.cc (the transport thread: rings, worker views, completions, cancels).
// Internal: included by those files only.
//
// Threads: members are grouped below by who may touch them (every thread, hook threads, or
// whoever holds the transport token); a Mutex-guarded member says so with GUARDED_BY.
#pragma once

#include <pthread.h>
#include <time.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include "common/mutex.h"
#include "hookhost/gateway.h"
#include "hookhost/hookhost.h"
#include "hookhost/request_checks.h"
#include "hookhost/tenant_limits.h"
#include "shm/arena.h"
#include "shm/descriptor.h"
#include "shm/ring.h"
#include "shm/status.h"

namespace ferry::hookhost {

static_assert(kMaxTenants == shm::kMaxTenants, "the node file's tenants fit shared memory");

inline constexpr int64_t kViewRefreshNs = 5'000'000;  // Workers publish their status every 5 ms.
inline constexpr int64_t kRepackNs = 1'000'000'000;   // lpt_packing re-placed every second.
inline constexpr int64_t kIdleWaitNs = 1'000'000;  // The transport's sleep with requests pending.
// With nothing pending it sleeps longer (a hand-off or completion wakes it at once). Nothing
// needs it sooner: a request's turn re-reads views older than kViewRefreshNs before it is
// sent, a refusal for no ready worker is decided on a view read after the request came, and
// a torn status counts as stale by how long it has been seen torn, not by how long ago it
// was last read whole. Each of its wake-ups costs an idle node CPU time (docs/benchmarks.md, "An
// idle node").
inline constexpr int64_t kQuietWaitNs = 100'000'000;
// Answers up to this many output bytes, with no postprocess to run, are joined and answered
// on the transport thread (their callback's encoding is short).
inline constexpr uint64_t kInlineAnswerBytes = 4096;
// A request is taken back from stalled workers at most this many times.
inline constexpr int kMaxReroutes = 2;

// One descriptor's worth of a request.
struct Piece {
  uint64_t sequence = 0;
  int64_t rows = 0;
  std::vector<uint64_t> input_blocks;  // Freed when the worker has answered.
  std::vector<shm::TensorRefData> tensors;
  shm::DescriptorData completion{};  // The worker's answer (kind 0: none, nothing to release).
  std::optional<Error> error;
};

struct Pending {
  const HookModel* model = nullptr;
  int variant = 0;
  int64_t model_rows = 0;  // After preprocess (the rows the worker runs).
  int64_t deadline_ns = 0;
  uint64_t trace_high = 0, trace_low = 0;
  Priority priority = kDefaultPriority;  // DescriptorData::priority.
  uint32_t tenant = 0;                   // DescriptorData::tenant.
  uint64_t sequence_id = 0;              // DescriptorData::sequence_id (0: none).
  uint8_t sequence_flags = 0;            // DescriptorData::sequence_flags.
  bool in_flight = false;                // Admitted by the limiter: released when answered.
  std::vector<Piece> pieces;
  uint64_t output_bytes = 0;  // Of the largest piece, in the worker's arena.
  size_t worker = 0;
  size_t pieces_left = 0;
  InferCallback done;
  std::function<Status(InferResponse)> on_response;  // A decoupled pipeline's (InferRequest).
  std::atomic<bool> answered{false};
  RequestTimings timings;
  int64_t start_ns = 0;
  // A pipeline's model call: no hooks run, and it is answered on the transport thread (the
  // pipeline's run waits for it on a hook thread, which must not be needed to answer it).
  bool subcall = false;
  int reroutes = 0;   // Times taken back from a stalled worker and sent again (RerouteStalled).
  uint32_t meta = 0;  // Non-zero: a committed call of pipeline run `meta` (DescriptorData::meta).
  std::shared_ptr<Pending> parent;        // A model call's pipeline request (cancelled with it).
  std::atomic<bool> run_released{false};  // A pipeline run's admission slot was given back.
};

using PendingPtr = std::shared_ptr<Pending>;

// A pipeline request admitted, waiting for a run slot.
struct QueuedRun {
  PendingPtr pending;
  std::vector<AllocatedTensor> client;
  std::vector<std::string> names;
};

// One pipeline request's run, on its hook thread.
struct PipelineRun {
  PendingPtr pending;
  uint32_t meta = 0;      // Its number: its committed calls carry it.
  int calls_done = 0;     // Model calls answered so far (the first queue like new work).
  int64_t waited_ns = 0;  // Inside host->call(), waiting (not the plugin's time).
};

// A hook thread's plugin call, watched by the transport for its time limit.
struct CallSlot {
  std::atomic<int64_t> started_ns{0};  // 0: no call running.
  std::atomic<bool> written_off{false};
  PendingPtr pending;  // Guarded by Impl::calls_mutex.
  std::string what;    // Guarded by Impl::calls_mutex.
  std::thread thread;  // Detached once written off.
};

// What a cancel action (InferRequest::cancel) holds of its hook host: the HookHost may be
// destroyed while a front-end thread still fires signals; the destructor clears `impl` first,
// waiting for a cancel in progress.
struct CancelGate {
  Mutex mu;
  HookHost::Impl* impl GUARDED_BY(mu) = nullptr;
};

struct HookHost::Impl {
  Impl(const shm::Segment& segment, uint32_t hookhost, const std::vector<HookModel>& models,
       HookHostOptions options)
      : segment(segment),
        slot(segment.HookhostSlot(hookhost)),
        generation(segment.generation(slot).load(std::memory_order_acquire)),
        models(models),
        options(std::move(options)),
        arena(segment, slot),
        counters(segment.frontend_counters(slot)),
        limiter(segment, hookhost, this->options.tenant_limits),
        gateway(this->options.gateway, models.size()),
        self_waker(segment, slot, slot) {
    for (uint32_t w = 0; w < segment.workers(); ++w) {
      submit.emplace_back(segment, segment.SubmissionRing(hookhost, w));
      complete.emplace_back(segment, segment.CompletionRing(w, hookhost));
      WorkerState state;
      state.slot = segment.WorkerSlot(w);
      state.generation = segment.generation(state.slot).load(std::memory_order_acquire);
      workers.push_back(state);
      worker_slots.push_back(state.slot);
    }
    notices.resize(workers.size());
    abandoned.resize(workers.size());
    views.assign(models.size(), std::vector<WorkerView>(workers.size()));
  }

  // --- Shared by every thread ---
  const shm::Segment& segment;
  const uint32_t slot;
  const uint32_t generation;
  const std::vector<HookModel>& models;
  const HookHostOptions options;
  std::atomic<size_t> pending_count{0};
  std::atomic<int> stuck{0};
  // The wire index of the model whose plugin call was written off last; -1: none yet.
  std::atomic<int> faulted_model{-1};
  std::atomic<uint64_t> timed_out{0};
  std::atomic<bool> stopping{false};

  Mutex arena_mutex;
  shm::Arena arena GUARDED_BY(arena_mutex);
  shm::FrontEndCountersData& counters;  // In this hook host's own object (status.h).
  TenantLimiter limiter;                // Counts every client request in flight by tenant.

  // Hook threads -> transport.
  Mutex handoff_mutex;
  std::deque<PendingPtr> outbox GUARDED_BY(handoff_mutex);
  std::deque<std::pair<size_t, shm::DescriptorData>> releases_in GUARDED_BY(handoff_mutex);
  std::deque<PendingPtr> cancels_in GUARDED_BY(handoff_mutex);  // Answered CANCELLED already.
  bool handoff_closed GUARDED_BY(handoff_mutex) = false;  // Stopping: hand-offs answered at once.
  std::atomic<bool> handoff_waiting{false};
  std::atomic<uint32_t> next_meta{1};  // Pipeline run numbers (0 is skipped).
  std::shared_ptr<CancelGate> cancel_gate = std::make_shared<CancelGate>();

  // Pipeline runs in progress at once: at most max(1, threads / 2), so ordinary requests keep
  // hook threads to be joined and answered on (a run holds its thread while its calls are
  // out); the others wait here, holding no thread.
  Mutex runs_mutex;
  int runs_active GUARDED_BY(runs_mutex) = 0;
  std::deque<QueuedRun> runs_waiting GUARDED_BY(runs_mutex);

  // The hook thread pool.
  Mutex pool_mutex;
  std::condition_variable_any pool_cv;
  std::deque<std::function<void()>> tasks GUARDED_BY(pool_mutex);
  Mutex calls_mutex;
  std::deque<CallSlot> calls GUARDED_BY(calls_mutex);  // Stable addresses; one per thread.

  // --- Whoever holds the transport token: the transport thread for each turn of its loop, or
  // a thread handing off a request that found the token free and sends it itself (no wake-up
  // of the transport thread on the way to the worker). Taking it (acquire) and giving it back
  // (release) order every access to what follows.
  std::atomic<bool> transport_token{false};
  // The transport thread is idle, waiting for work. A hand-off is sent by its own thread when
  // the transport thread is idle and nothing else is pending (light load: a wake-up saved).
  // Under load the transport thread sends hand-offs, several a turn, so the worker finds
  // them together and batches them.
  std::atomic<bool> transport_idle{false};
  bool TryTakeToken() { return !transport_token.exchange(true, std::memory_order_acquire); }
  void ReturnToken() { transport_token.store(false, std::memory_order_release); }
  struct WorkerState {
    uint32_t slot = 0;
    uint32_t generation = 0;
    uint32_t view_generation = 0;  // The incarnation the last status read described.
    bool read_whole = false;       // Its status has been read whole at least once.
    int64_t torn_since_ns = 0;     // The first of the torn reads since (0: the last was whole).
    int64_t read_at_ns = 0;        // The last read, whole or torn.
    uint64_t heartbeat = 0;        // Its heartbeat as last read, and when it last advanced.
    int64_t beat_ns = 0;
    double last_compute[shm::kMaxStatusModels] = {};
  };
  Gateway gateway;
  shm::Waker self_waker;
  std::vector<shm::RingProducer> submit;
  std::vector<shm::RingConsumer> complete;
  std::vector<WorkerState> workers;
  std::vector<uint32_t> worker_slots;  // workers[w].slot: a sequence's worker is hashed by it.
  std::vector<std::vector<WorkerView>> views;  // [model][worker], every 5 ms.
  // Per worker: releases and cancels waiting for submission-ring space.
  std::vector<std::deque<shm::DescriptorData>> notices;
  std::deque<PendingPtr> waiting;   // Prepared, not yet sent.
  std::vector<PendingPtr> cancels;  // Cancelled requests whose pieces in flight get a kCancel.
  std::unordered_map<uint64_t, std::pair<PendingPtr, size_t>> inflight;  // sequence -> piece.
  // Per worker: sequences taken back from it while it was stalled. Its answer to one, if it
  // ever comes, is released unread.
  std::vector<std::unordered_set<uint64_t>> abandoned;
  uint64_t next_sequence = 1;
  int64_t views_at = 0;
  int64_t first_view_ns = 0;  // The first RefreshViews: a worker not yet seen is waited for.
  int64_t repacked_at = 0;
  std::thread transport;

  // Answers `p` once: the callback runs on the calling thread. `plugin_ns` (counted as its
  // plugins' time) defaults to what the result, or for an error `p`, says; a thread that
  // does not own `p`'s timings (a cancel) passes 0.
  void Answer(const PendingPtr& p, Result<InferResponse> result, int64_t plugin_ns = -1);

  // A client request answered: its outcome (nullopt: success) and its plugins' time.
  void Count(const HookModel* model, uint32_t tenant, std::optional<ErrorCode> code,
             int64_t plugin_ns);

  void Post(std::function<void()> task);

  void WakeTransport();

  void Handoff(const PendingPtr& p);

  // Answers `p` where it is safe to: a pipeline's model call on this thread (its run waits on
  // a hook thread), anything else on a hook thread.
  void AnswerLater(const PendingPtr& p, Error error);

  void FreeBlocks(const std::vector<uint64_t>& blocks);

  // --- A request's entry (HookHost::Submit) ---
  // The one check of a request as it enters: the host's pending limit, stopping, its model
  // (served, loaded) and its tenant number. Counts `p` as pending (Answer uncounts it).
  Status Admit(const PendingPtr& p, const HookModel* model);
  // Orders the client's tensors by the manifest and sends the request on: straight to a
  // worker (Route), or, with a preprocess or a pipeline run, copied into the arena first.
  // Answers `p` on a refusal.
  void Accept(const PendingPtr& p, std::span<const ClientTensor> inputs);
  // The client's tensors, checked against `specs` and copied into the arena; nullopt (and `p`
  // answered) when they do not fit the manifest or the arena.
  std::optional<std::vector<AllocatedTensor>> StageClientTensors(
      const PendingPtr& p, const std::vector<TensorSpec>& specs,
      std::span<const TensorMeta> ordered, std::span<const std::span<const uint8_t>> bytes);

  // --- Hook threads ---
  void StartThread();

  void PoolLoop(CallSlot* call);

  // Runs a plugin call under the time limit (past it, the request is answered
  // DEADLINE_EXCEEDED meanwhile and this thread is written off). Adds its time to *plugin_ns.
  template <typename Call>
  Status WatchedCall(const PendingPtr& p, std::string what, int64_t* plugin_ns, Call call_plugin) {
    CallSlot* call = t_call;
    {
      MutexLock lock(&calls_mutex);
      call->pending = p;
      call->what = std::move(what);
    }
    int64_t start = MonotonicNs();
    call->started_ns.store(start, std::memory_order_release);
    Status s = call_plugin();
    call->started_ns.store(0, std::memory_order_release);
    *plugin_ns += MonotonicNs() - start;
    {
      MutexLock lock(&calls_mutex);
      call->pending.reset();
    }
    return s;
  }

  std::optional<AllocatedTensor> AllocateTensor(DType dtype, const Shape& shape);
  // A block of exactly `bytes` for a tensor whose size is its data's (BYTES).
  std::optional<AllocatedTensor> AllocateBlock(DType dtype, const Shape& shape, uint64_t bytes);

  // Copies the model-input tensors (ordered as request_inputs(), each a whole block) into one
  // block per piece and input; fills p->pieces. The source blocks are not freed.
  Status MakePieces(Pending& p, std::span<const TensorMeta> inputs,
                    std::span<const std::span<const uint8_t>> bytes,
                    const std::vector<int64_t>& piece_rows);

  // The outputs' bytes of the largest piece in the worker's arena; the piece count.
  void SetOutputBytes(Pending& p, const std::vector<int64_t>& piece_rows);

  // Model inputs ready (in `inputs`, ordered as request_inputs()): variant, split, hand off.
  // `adopt`: arena blocks already holding `inputs` (a plugin's outputs); a request sent in one
  // piece then uses them as they are (*adopted set: the pieces own them now), else they are
  // copied into the pieces' blocks and stay the caller's.
  Status Route(const PendingPtr& p, std::span<const TensorMeta> inputs,
               std::span<const std::span<const uint8_t>> bytes,
               std::span<const uint64_t> adopt = {}, bool* adopted = nullptr);

  // On a hook thread: preprocess the client tensors (in `client` blocks), then route.
  void Preprocess(const PendingPtr& p, std::vector<AllocatedTensor> client,
                  std::vector<std::string> names);

  // On a hook thread, once every piece is answered: join, postprocess, respond, release.
  void Finish(const PendingPtr& p);

  // The joined model outputs, copied out of the worker's arena (checked against the manifest,
  // and against the worker restarting while they were read).
  Result<InferResponse> Collect(Pending& p);

  uint32_t workers_slot(size_t worker) const {
    return segment.WorkerSlot(static_cast<uint32_t>(worker));
  }

  Result<InferResponse> Postprocess(const PendingPtr& p, InferResponse joined);

  // A plugin's response tensors, each checked against its spec, copied into `*out`.
  // A decoupled run's host->send(): `tensors` checked against the pipeline's [[outputs]] and
  // handed to the request's on_response; CANCELLED once it is answered.
  Status SendResponse(const PendingPtr& p, const HookModel& model,
                      std::span<const TensorView> tensors);
  static Status TakeOutputs(const HookModel& model, std::string_view what,
                            const std::vector<TensorSpec>& specs,
                            const std::vector<AllocatedTensor>& produced,
                            std::vector<ResponseTensor>* out);

  void FreeProduced(const std::vector<AllocatedTensor>& produced);

  // --- Pipelines ---

  int RunLimit() const { return std::max(1, options.threads / 2); }

  void AdmitRun(QueuedRun run);

  void PostRun(QueuedRun run);

  // Gives `p`'s run slot to the next waiting run, once (a run written off past its time limit
  // gives it back then, and not again if it ever returns).
  void ReleaseRun(const PendingPtr& p);

  // On a hook thread: a pipeline request's whole run (client tensors in `client` blocks).
  void RunPipeline(const PendingPtr& p, std::vector<AllocatedTensor> client,
                   std::vector<std::string> names);

  // A pipeline run's host->call(): every call submitted at once, then waited for (that time
  // is not the plugin's: its call_timeout_ms clock stops meanwhile).
  Result<std::vector<std::vector<OwnedTensor>>> CallModels(PipelineRun& run,
                                                           std::span<const ModelCall> calls);

  // Queues one model call of pipeline request `parent` (its inputs copied before this
  // returns); the future is always set.
  std::future<Result<InferResponse>> SubmitCall(const PendingPtr& parent, const HookModel& target,
                                                const ModelCall& call, uint32_t meta);

  // --- Transport thread ---
  void TransportLoop();

  bool HasWork();

  bool TakeHandoff();

  // A descriptor of `kind` for request `sequence` of `model`, from this incarnation.
  shm::DescriptorData Addressed(shm::DescriptorKind kind, uint64_t sequence, size_t model) const;

  // From the thread firing InferRequest::cancel: answers `p` CANCELLED and has the transport
  // take back what it sent of it.
  void Cancel(const PendingPtr& p);

  void RefreshViews(int64_t now);
  // A worker's status has not yet been read whole, within options.stale_status_ns of the first
  // read.
  bool Unseen(int64_t now) const;
  bool SendWaiting(int64_t now);
  // A request sent to a worker where the model's weights were (or were not) resident.
  void CountPlacement(size_t model, bool resident);
  void SendCancels();
  bool PollCompletions();
  void CompletePiece(const PendingPtr& p, Piece& piece);
  bool PushReleases();
  void CheckWorkerRestarts();
  // Requests sent to a worker whose heartbeat is older than options.stall_ns, none of whose
  // pieces it has answered, are taken back (a kCancel for each piece, so it drops them when
  // it resumes) and sent again, to another worker that is responsive and has the model. At
  // most kMaxReroutes times per request.
  void RerouteStalled(int64_t now);
  void CheckCallTimeouts(int64_t now);

  static thread_local CallSlot* t_call;
};

}  // namespace ferry::hookhost
