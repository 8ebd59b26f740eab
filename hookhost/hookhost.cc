#include "hookhost/hookhost.h"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "common/clock.h"
#include "hookhost/gateway.h"
#include "hookhost/request_checks.h"
#include "shm/arena.h"
#include "shm/descriptor.h"
#include "shm/recovery.h"
#include "shm/ring.h"
#include "shm/status.h"

namespace ferry::hookhost {
namespace {

static_assert(kMaxTenants == shm::kMaxTenants, "the node file's tenants fit shared memory");

constexpr int64_t kViewRefreshNs = 5'000'000;  // Workers publish their status every 5 ms.
constexpr int64_t kRepackNs = 1'000'000'000;   // lpt_packing re-placed every second.
constexpr int64_t kIdleWaitNs = 1'000'000;     // The transport's sleep with requests pending.
// With nothing pending it sleeps longer (a hand-off or completion wakes it at once); it still
// re-reads the workers' status every so often, so a view is never older than a quarter of
// stale_status_ns when a request arrives.
constexpr int64_t kQuietWaitNs = 20'000'000;
// Answers up to this many output bytes, with no postprocess to run, are joined and answered
// on the transport thread (their callback's encoding is short).
constexpr uint64_t kInlineAnswerBytes = 4096;

// One descriptor's worth of a request.
struct Piece {
  uint64_t sequence = 0;
  int64_t rows = 0;
  std::vector<uint64_t> input_blocks;  // Freed when the worker has answered.
  std::vector<shm::TensorRefData> tensors;
  shm::DescriptorData completion{};  // The worker's answer (kind 0: none, nothing to release).
  std::optional<Error> error;
};

}  // namespace

struct Pending {
  const HookModel* model = nullptr;
  int variant = 0;
  int64_t model_rows = 0;  // After preprocess (the rows the worker runs).
  int64_t deadline_ns = 0;
  uint64_t trace_high = 0, trace_low = 0;
  uint32_t priority = 0;  // DescriptorData::priority.
  uint32_t tenant = 0;    // DescriptorData::tenant.
  std::vector<Piece> pieces;
  uint64_t output_bytes = 0;  // Of the largest piece, in the worker's arena.
  size_t worker = 0;
  size_t pieces_left = 0;
  InferCallback done;
  std::atomic<bool> answered{false};
  RequestTimings timings;
  int64_t start_ns = 0;
  // A pipeline's model call: no hooks run, and it is answered on the transport thread (the
  // pipeline's run waits for it on a hook thread, which must not be needed to answer it).
  bool subcall = false;
  uint32_t meta = 0;  // Non-zero: a committed call of pipeline run `meta` (DescriptorData::meta).
  std::shared_ptr<Pending> parent;        // A model call's pipeline request (cancelled with it).
  std::atomic<bool> run_released{false};  // A pipeline run's admission slot was given back.
};

namespace {

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
  PendingPtr pending;            // Guarded by Impl::calls_mutex.
  std::string what;              // Guarded by Impl::calls_mutex.
  std::thread thread;            // Detached once written off.
  clockid_t cpu_clock{};         // The thread's CPU-time clock (set at its start).
  int64_t cpu_at_write_off = 0;  // Its CPU time when written off.
  bool spinning = false;         // Counted in Impl::spinning.
};

// CPU time a written-off call may burn before its host asks for a restart.
constexpr int64_t kSpinningCpuNs = 1'000'000'000;

// The CPU time of the thread `clock` belongs to, in ns; 0 when it cannot be read.
int64_t ThreadCpuNs(clockid_t clock) {
  timespec t{};
  return clock_gettime(clock, &t) == 0 ? t.tv_sec * 1'000'000'000 + t.tv_nsec : 0;
}

}  // namespace

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
        gateway(this->options.gateway, models.size()),
        self_waker(segment, slot, slot) {
    for (uint32_t w = 0; w < segment.workers(); ++w) {
      submit.emplace_back(segment, segment.SubmissionRing(hookhost, w));
      complete.emplace_back(segment, segment.CompletionRing(w, hookhost));
      WorkerState state;
      state.slot = segment.WorkerSlot(w);
      state.generation = segment.generation(state.slot).load(std::memory_order_acquire);
      workers.push_back(state);
    }
    notices.resize(workers.size());
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
  std::atomic<int> spinning{0};  // Written-off calls still burning CPU (CallSlot::spinning).
  std::atomic<uint64_t> timed_out{0};
  std::atomic<bool> stopping{false};

  Mutex arena_mutex;
  shm::Arena arena GUARDED_BY(arena_mutex);
  shm::FrontEndCountersData& counters;  // In this hook host's own object (status.h).

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
    int64_t read_ok_ns = 0;        // When its status was last read whole (0: never yet).
    uint64_t heartbeat = 0;        // Its heartbeat as last read, and when it last advanced.
    int64_t beat_ns = 0;
    double last_compute[shm::kMaxStatusModels] = {};
  };
  Gateway gateway;
  shm::Waker self_waker;
  std::vector<shm::RingProducer> submit;
  std::vector<shm::RingConsumer> complete;
  std::vector<WorkerState> workers;
  std::vector<std::vector<WorkerView>> views;  // [model][worker], every 5 ms.
  // Per worker: releases and cancels waiting for submission-ring space.
  std::vector<std::deque<shm::DescriptorData>> notices;
  std::deque<PendingPtr> waiting;   // Prepared, not yet sent.
  std::vector<PendingPtr> cancels;  // Cancelled requests whose pieces in flight get a kCancel.
  std::unordered_map<uint64_t, std::pair<PendingPtr, size_t>> inflight;  // sequence -> piece.
  uint64_t next_sequence = 1;
  int64_t views_at = 0;
  int64_t first_view_ns = 0;  // The first RefreshViews: a worker not yet seen is waited for.
  int64_t repacked_at = 0;
  std::thread transport;

  // Answers `p` once: the callback runs on the calling thread. `plugin_ns` (counted as its
  // plugins' time) defaults to what the result, or for an error `p`, says; a thread that
  // does not own `p`'s timings (a cancel) passes 0.
  void Answer(const PendingPtr& p, Result<InferResponse> result, int64_t plugin_ns = -1) {
    if (p->answered.exchange(true)) {
      return;
    }
    pending_count.fetch_sub(1, std::memory_order_relaxed);
    if (!p->subcall) {
      if (plugin_ns < 0) {
        plugin_ns = result.ok() ? result->timings.plugin_ns : p->timings.plugin_ns;
      }
      Count(p->model, p->tenant, result.ok() ? std::nullopt : std::optional(result.error().code),
            plugin_ns);
    }
    p->done(std::move(result));
  }

  // A client request answered: its outcome (nullopt: success) and its plugins' time.
  void Count(const HookModel* model, uint32_t tenant, std::optional<ErrorCode> code,
             int64_t plugin_ns) {
    size_t outcome = code ? static_cast<size_t>(*code) + 1 : 0;
    if (model == nullptr || model->index >= shm::kMaxStatusModels) {
      counters.unrouted[outcome].fetch_add(1, std::memory_order_relaxed);
      return;
    }
    // Submit refuses larger tenants; the clamp keeps a shared-memory index in bounds anyway.
    shm::RequestCountsData& c =
        counters.models[model->index][std::min<uint32_t>(tenant, shm::kMaxTenants)];
    c.answered[outcome].fetch_add(1, std::memory_order_relaxed);
    c.plugin_ns.fetch_add(static_cast<uint64_t>(std::max<int64_t>(plugin_ns, 0)),
                          std::memory_order_relaxed);
  }

  void Post(std::function<void()> task) {
    {
      MutexLock lock(&pool_mutex);
      tasks.push_back(std::move(task));
    }
    pool_cv.notify_one();
  }

  void WakeTransport() {
    handoff_waiting.store(true, std::memory_order_release);
    self_waker.Notify();
  }

  void Handoff(const PendingPtr& p) {
    bool closed;
    {
      MutexLock lock(&handoff_mutex);
      closed = handoff_closed;
      if (!closed) {
        outbox.push_back(p);
      }
    }
    if (closed) {
      for (Piece& piece : p->pieces) {
        FreeBlocks(piece.input_blocks);
        piece.input_blocks.clear();
      }
      Answer(p, Unavailable("the hook host is stopping"));
      return;
    }
    if (transport_idle.load(std::memory_order_relaxed) &&
        pending_count.load(std::memory_order_relaxed) <= 1 && TryTakeToken()) {
      // The transport thread is idle and this is the only request: send it from here. What cannot
      // go yet (a full ring, no worker ready) is left for the transport thread.
      int64_t now = MonotonicNs();
      TakeHandoff();
      if (now - views_at >= kViewRefreshNs) {
        RefreshViews(now);
      }
      SendWaiting(now);
      SendCancels();
      PushReleases();
      bool left = !waiting.empty() || std::any_of(notices.begin(), notices.end(),
                                                  [](const auto& n) { return !n.empty(); });
      ReturnToken();
      if (!left) {
        return;
      }
    }
    WakeTransport();
  }

  // Answers `p` where it is safe to: a pipeline's model call on this thread (its run waits on
  // a hook thread), anything else on a hook thread.
  void AnswerLater(const PendingPtr& p, Error error) {
    if (p->subcall) {
      Answer(p, std::move(error));
    } else {
      Post([this, p, e = std::move(error)] { Answer(p, e); });
    }
  }

  void FreeBlocks(const std::vector<uint64_t>& blocks) {
    MutexLock lock(&arena_mutex);
    for (uint64_t b : blocks) {
      (void)arena.Free(b);
    }
  }

  // --- Hook threads ---
  void StartThread() {
    MutexLock lock(&calls_mutex);
    CallSlot* call = &calls.emplace_back();
    call->thread = std::thread([this, call] { PoolLoop(call); });
    pthread_getcpuclockid(call->thread.native_handle(), &call->cpu_clock);
  }

  void PoolLoop(CallSlot* call) {
    t_call = call;
    while (true) {
      std::function<void()> task;
      {
        MutexLock lock(&pool_mutex);
        // Stopping drains the queue first: every task answers its request.
        pool_cv.wait(pool_mutex,
                     [&]() REQUIRES(pool_mutex) { return stopping.load() || !tasks.empty(); });
        if (tasks.empty()) {
          return;
        }
        task = std::move(tasks.front());
        tasks.pop_front();
      }
      task();
      if (call->written_off.load()) {
        stuck.fetch_sub(1, std::memory_order_relaxed);  // It came back; its stand-in runs on.
        return;
      }
    }
  }

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

  std::optional<AllocatedTensor> AllocateTensor(DType dtype, const Shape& shape) {
    std::optional<uint64_t> bytes = TensorByteSize(dtype, shape);
    if (!bytes) {
      return std::nullopt;
    }
    MutexLock lock(&arena_mutex);
    Result<shm::Block> block = arena.Allocate(std::max<uint64_t>(*bytes, 1));
    if (!block.ok()) {
      return std::nullopt;
    }
    return AllocatedTensor{dtype, shape, arena.Bytes(*block).first(*bytes), block->offset};
  }

  // Copies the model-input tensors (ordered as manifest.inputs, each a whole block) into one
  // block per piece and input; fills p->pieces. The source blocks are not freed.
  Status MakePieces(Pending& p, std::span<const TensorMeta> inputs,
                    std::span<const std::span<const uint8_t>> bytes,
                    const std::vector<int64_t>& piece_rows) {
    const Manifest& m = p.model->manifest();
    int64_t first_row = 0;
    for (int64_t rows : piece_rows) {
      Piece piece;
      piece.rows = rows;
      for (size_t i = 0; i < inputs.size(); ++i) {
        Shape shape(inputs[i].shape.begin(), inputs[i].shape.end());
        uint64_t row_bytes = 0, offset = 0;
        if (m.inputs[i].batch_axis) {  // Axis 0 whenever there is more than one piece.
          row_bytes = inputs[i].bytes / static_cast<uint64_t>(p.model_rows);
          shape[static_cast<size_t>(*m.inputs[i].batch_axis)] = rows;
          offset = static_cast<uint64_t>(first_row) * row_bytes;
        }
        uint64_t n =
            m.inputs[i].batch_axis ? row_bytes * static_cast<uint64_t>(rows) : inputs[i].bytes;
        std::optional<AllocatedTensor> block = AllocateTensor(inputs[i].dtype, shape);
        if (!block) {
          for (Piece& made : p.pieces) {
            FreeBlocks(made.input_blocks);
          }
          FreeBlocks(piece.input_blocks);
          p.pieces.clear();
          return ResourceExhausted("model '" + p.model->name +
                                   "': this hook host's arena is full (retry in " +
                                   std::to_string(kRetryAfterMs) + " ms)");
        }
        std::memcpy(block->bytes.data(), bytes[i].data() + offset, n);
        piece.input_blocks.push_back(block->block);
        piece.tensors.push_back(shm::MakeTensorRef(slot, block->block, n, inputs[i].dtype, shape));
      }
      p.pieces.push_back(std::move(piece));
      first_row += rows;
    }
    SetOutputBytes(p, piece_rows);
    return OkStatus();
  }

  // The outputs' bytes of the largest piece in the worker's arena; the piece count.
  void SetOutputBytes(Pending& p, const std::vector<int64_t>& piece_rows) {
    const Manifest& m = p.model->manifest();
    p.output_bytes = 0;
    for (size_t o = 0; o < m.outputs.size(); ++o) {
      Shape shape = m.variants[static_cast<size_t>(p.variant)].outputs.at(m.outputs[o].name);
      if (m.outputs[o].batch_axis) {
        shape[static_cast<size_t>(*m.outputs[o].batch_axis)] = piece_rows.front();
      }
      p.output_bytes +=
          shm::AlignUp(TensorByteSize(m.outputs[o].dtype, shape).value_or(0), shm::kBlockAlignment);
    }
    p.pieces_left = p.pieces.size();
    p.timings.pieces = static_cast<int>(p.pieces.size());
  }

  // Model inputs ready (in `inputs`, ordered as manifest.inputs): variant, split, hand off.
  // `adopt`: arena blocks already holding `inputs` (a plugin's outputs); a request sent in one
  // piece then uses them as they are (*adopted set: the pieces own them now), else they are
  // copied into the pieces' blocks and stay the caller's.
  Status Route(const PendingPtr& p, std::span<const TensorMeta> inputs,
               std::span<const std::span<const uint8_t>> bytes,
               std::span<const uint64_t> adopt = {}, bool* adopted = nullptr) {
    const HookModel& model = *p->model;
    int64_t rows = 0;
    FERRY_ASSIGN_OR_RETURN(p->variant, MatchVariant(model.name, model.manifest(), inputs, &rows));
    FERRY_RETURN_IF_ERROR(CheckRanges(model.name, model.manifest().inputs, inputs, bytes));
    p->model_rows = rows;
    bool preserved = p->subcall || model.plugin == nullptr || !model.plugin->has_preprocess() ||
                     (model.plugin->preserves_rows() && model.manifest().hooks.preserves_rows);
    FERRY_ASSIGN_OR_RETURN(
        std::vector<int64_t> piece_rows,
        PieceRows(model.name, model.manifest(), rows, preserved, segment.ring_capacity()));
    if (!adopt.empty() && piece_rows.size() == 1) {
      Piece piece;
      piece.rows = rows;
      for (size_t i = 0; i < inputs.size(); ++i) {
        piece.input_blocks.push_back(adopt[i]);
        piece.tensors.push_back(
            shm::MakeTensorRef(slot, adopt[i], inputs[i].bytes, inputs[i].dtype, inputs[i].shape));
      }
      p->pieces.push_back(std::move(piece));
      SetOutputBytes(*p, piece_rows);
      *adopted = true;
    } else {
      FERRY_RETURN_IF_ERROR(MakePieces(*p, inputs, bytes, piece_rows));
    }
    Handoff(p);
    return OkStatus();
  }

  // On a hook thread: preprocess the client tensors (in `client` blocks), then route.
  void Preprocess(const PendingPtr& p, std::vector<AllocatedTensor> client,
                  std::vector<std::string> names) {
    const HookModel& model = *p->model;
    const Manifest& m = model.manifest();
    int64_t start = MonotonicNs();
    std::vector<TensorView> plugin_inputs;
    for (size_t i = 0; i < client.size(); ++i) {
      plugin_inputs.push_back({names[i], client[i].dtype, client[i].shape, client[i].bytes});
    }
    std::vector<std::string> wanted;
    for (const TensorSpec& t : m.inputs) {
      wanted.push_back(t.name);
    }
    std::vector<AllocatedTensor> produced;
    Status s = WatchedCall(p, "preprocess", &p->timings.plugin_ns, [&] {
      return model.plugin->Preprocess(
          plugin_inputs, wanted,
          [this](uint32_t, DType dtype, const Shape& shape) {
            return AllocateTensor(dtype, shape);
          },
          &produced);
    });
    p->timings.preprocess_ns = MonotonicNs() - start;
    std::vector<uint64_t> client_blocks;
    for (const AllocatedTensor& t : client) {
      client_blocks.push_back(t.block);
    }
    FreeBlocks(client_blocks);
    std::vector<uint64_t> produced_blocks;
    for (const AllocatedTensor& t : produced) {
      produced_blocks.push_back(t.block);
    }
    bool adopted = false;
    if (s.ok() && !p->answered.load()) {
      std::vector<TensorMeta> metas;
      std::vector<std::span<const uint8_t>> bytes;
      for (size_t i = 0; i < produced.size(); ++i) {
        metas.push_back(
            {wanted[i], produced[i].dtype, produced[i].shape, produced[i].bytes.size()});
        bytes.push_back(produced[i].bytes);
      }
      s = Route(p, metas, bytes, produced_blocks, &adopted);
      if (!s.ok() && s.error().code == ErrorCode::kInvalidArgument) {
        // The plugin's output does not fit the model: the plugin's fault, not the client's.
        s = Internal("plugin " + model.plugin->path() + " preprocess: " + s.error().message);
      }
    }
    if (!adopted) {
      FreeBlocks(produced_blocks);  // Copied into the pieces' blocks, or not needed.
    }
    if (!s.ok()) {
      Answer(p, s.error());
    }
  }

  // On a hook thread, once every piece is answered: join, postprocess, respond, release.
  void Finish(const PendingPtr& p) {
    int64_t start = MonotonicNs();
    const HookModel& model = *p->model;
    Result<InferResponse> result = Collect(*p);
    std::vector<shm::DescriptorData> to_release;
    for (const Piece& piece : p->pieces) {
      if (piece.completion.kind != 0) {  // Answered by the worker (ok or with a message).
        shm::DescriptorData release = piece.completion;
        release.kind = static_cast<uint16_t>(shm::DescriptorKind::kRelease);
        release.num_tensors = 0;
        release.sender_generation = generation;
        to_release.push_back(release);
      }
    }
    {
      // Collect copied the outputs: the worker gets its blocks back before postprocess runs.
      MutexLock lock(&handoff_mutex);
      for (const shm::DescriptorData& r : to_release) {
        releases_in.emplace_back(p->worker, r);
      }
    }
    WakeTransport();
    if (result.ok() && !p->subcall && !p->answered.load() && model.plugin != nullptr &&
        model.plugin->has_postprocess()) {
      result = Postprocess(p, std::move(*result));
    }
    if (result.ok()) {
      result->timings.postprocess_ns = MonotonicNs() - start;
      result->timings.total_ns = MonotonicNs() - p->start_ns;
    }
    Answer(p, std::move(result));
  }

  // The joined model outputs, copied out of the worker's arena (checked against the manifest,
  // and against the worker restarting while they were read).
  Result<InferResponse> Collect(Pending& p) {
    const Manifest& m = p.model->manifest();
    for (const Piece& piece : p.pieces) {
      if (piece.error) {
        return *piece.error;
      }
    }
    InferResponse response;
    response.timings = p.timings;
    const ShapeVariant& variant = m.variants[static_cast<size_t>(p.variant)];
    int64_t total_rows = 0;
    for (const Piece& piece : p.pieces) {
      total_rows += piece.rows;
    }
    uint32_t worker_slot = workers_slot(p.worker);
    for (size_t o = 0; o < m.outputs.size(); ++o) {
      const TensorSpec& spec = m.outputs[o];
      ResponseTensor out;
      out.name = spec.name;
      out.dtype = spec.dtype;
      out.shape = variant.outputs.at(spec.name);
      if (spec.batch_axis) {
        out.shape[static_cast<size_t>(*spec.batch_axis)] = total_rows;
      }
      for (const Piece& piece : p.pieces) {
        const shm::DescriptorData& c = piece.completion;
        Shape want = variant.outputs.at(spec.name);
        if (spec.batch_axis) {
          want[static_cast<size_t>(*spec.batch_axis)] = piece.rows;
        }
        const shm::TensorRefData& t = c.tensors[o];
        if (c.num_tensors != m.outputs.size() || t.dtype != static_cast<uint16_t>(spec.dtype) ||
            t.rank != want.size() || !std::equal(want.begin(), want.end(), t.shape)) {
          return Internal("model '" + p.model->name + "': the worker's output '" + spec.name +
                          "' is not " + DescribeTensor(spec.dtype, want));
        }
        std::span<uint8_t> bytes = shm::TensorBytes(segment, t);
        out.bytes.insert(out.bytes.end(), bytes.begin(), bytes.end());
      }
      response.outputs.push_back(std::move(out));
    }
    for (const Piece& piece : p.pieces) {
      if (!shm::StillCurrent(segment, worker_slot, piece.completion.sender_generation)) {
        return Unavailable("model '" + p.model->name +
                           "': the worker restarted while its outputs were read");
      }
    }
    return response;
  }

  uint32_t workers_slot(size_t worker) const {
    return segment.WorkerSlot(static_cast<uint32_t>(worker));
  }

  Result<InferResponse> Postprocess(const PendingPtr& p, InferResponse joined) {
    const HookModel& model = *p->model;
    const std::vector<TensorSpec>& specs = model.manifest().client_outputs();
    std::vector<TensorView> plugin_inputs;
    for (const ResponseTensor& t : joined.outputs) {
      plugin_inputs.push_back({t.name, t.dtype, t.shape, t.bytes});
    }
    std::vector<std::string> names;
    for (const TensorSpec& t : specs) {
      names.push_back(t.name);
    }
    std::vector<AllocatedTensor> produced;
    Status s = WatchedCall(p, "postprocess", &joined.timings.plugin_ns, [&] {
      return model.plugin->Postprocess(
          plugin_inputs, names,
          [this](uint32_t, DType dtype, const Shape& shape) {
            return AllocateTensor(dtype, shape);
          },
          &produced);
    });
    InferResponse response;
    response.timings = joined.timings;
    if (s.ok()) {
      s = TakeOutputs(model, "postprocess", specs, produced, &response.outputs);
    }
    FreeProduced(produced);
    if (!s.ok()) {
      return s.error();
    }
    return response;
  }

  // A plugin's response tensors, each checked against its spec, copied into `*out`.
  static Status TakeOutputs(const HookModel& model, std::string_view what,
                            const std::vector<TensorSpec>& specs,
                            const std::vector<AllocatedTensor>& produced,
                            std::vector<ResponseTensor>* out) {
    for (size_t i = 0; i < produced.size(); ++i) {
      const TensorSpec& spec = specs[i];
      bool fits = produced[i].dtype == spec.dtype && produced[i].shape.size() == spec.shape.size();
      for (size_t k = 0; fits && k < spec.shape.size(); ++k) {
        fits = spec.shape[k] == kBatchDim || spec.shape[k] == produced[i].shape[k];
      }
      if (!fits) {
        return Internal("plugin " + model.plugin->path() + " " + std::string(what) + ": output '" +
                        spec.name + "' is " + DescribeTensor(produced[i].dtype, produced[i].shape) +
                        ", the manifest declares " + DescribeTensor(spec.dtype, spec.shape));
      }
      out->push_back({spec.name,
                      produced[i].dtype,
                      produced[i].shape,
                      {produced[i].bytes.begin(), produced[i].bytes.end()}});
    }
    return OkStatus();
  }

  void FreeProduced(const std::vector<AllocatedTensor>& produced) {
    std::vector<uint64_t> blocks;
    for (const AllocatedTensor& t : produced) {
      blocks.push_back(t.block);
    }
    FreeBlocks(blocks);
  }

  // --- Pipelines ---

  int RunLimit() const { return std::max(1, options.threads / 2); }

  void AdmitRun(QueuedRun run) {
    {
      MutexLock lock(&runs_mutex);
      if (runs_active >= RunLimit()) {
        runs_waiting.push_back(std::move(run));
        return;
      }
      ++runs_active;
    }
    PostRun(std::move(run));
  }

  void PostRun(QueuedRun run) {
    Post([this, run = std::move(run)]() mutable {
      PendingPtr p = run.pending;
      if (p->answered.load()) {
        FreeProduced(run.client);  // Cancelled while it waited for a run slot.
      } else {
        RunPipeline(p, std::move(run.client), std::move(run.names));
      }
      ReleaseRun(p);
    });
  }

  // Gives `p`'s run slot to the next waiting run, once (a run written off past its time limit
  // gives it back then, and not again if it ever returns).
  void ReleaseRun(const PendingPtr& p) {
    if (p->run_released.exchange(true)) {
      return;
    }
    std::optional<QueuedRun> next;
    {
      MutexLock lock(&runs_mutex);
      if (runs_waiting.empty()) {
        --runs_active;
      } else {
        next = std::move(runs_waiting.front());
        runs_waiting.pop_front();
      }
    }
    if (next) {
      PostRun(std::move(*next));
    }
  }

  // On a hook thread: a pipeline request's whole run (client tensors in `client` blocks).
  void RunPipeline(const PendingPtr& p, std::vector<AllocatedTensor> client,
                   std::vector<std::string> names) {
    const HookModel& model = *p->model;
    const std::vector<TensorSpec>& specs = model.manifest().outputs;
    int64_t start = MonotonicNs();
    std::vector<TensorView> inputs;
    for (size_t i = 0; i < client.size(); ++i) {
      inputs.push_back({names[i], client[i].dtype, client[i].shape, client[i].bytes});
    }
    std::vector<std::string> wanted;
    for (const TensorSpec& t : specs) {
      wanted.push_back(t.name);
    }
    uint32_t meta = next_meta.fetch_add(1, std::memory_order_relaxed);
    if (meta == 0) {
      meta = next_meta.fetch_add(1, std::memory_order_relaxed);
    }
    PipelineRun run{p, meta};
    std::vector<AllocatedTensor> produced;
    Status s = WatchedCall(p, "run", &p->timings.plugin_ns, [&] {
      return model.plugin->Run(
          inputs, wanted,
          [this](uint32_t, DType dtype, const Shape& shape) {
            return AllocateTensor(dtype, shape);
          },
          [this, &run](std::span<const ModelCall> calls) { return CallModels(run, calls); },
          &produced);
    });
    p->timings.plugin_ns -= run.waited_ns;
    p->timings.postprocess_ns = MonotonicNs() - start;  // The whole run, waits included.
    p->timings.pieces = run.calls_done;
    FreeProduced(client);
    InferResponse response;
    if (s.ok()) {
      s = TakeOutputs(model, "run", specs, produced, &response.outputs);
    }
    FreeProduced(produced);
    if (!s.ok()) {
      Answer(p, s.error());
      return;
    }
    response.timings = p->timings;
    response.timings.total_ns = MonotonicNs() - p->start_ns;
    Answer(p, std::move(response));
  }

  // A pipeline run's host->call(): every call submitted at once, then waited for (that time
  // is not the plugin's: its call_timeout_ms clock stops meanwhile).
  Result<std::vector<std::vector<OwnedTensor>>> CallModels(PipelineRun& run,
                                                           std::span<const ModelCall> calls) {
    const PendingPtr& parent = run.pending;
    const HookModel& pipeline = *parent->model;
    if (parent->answered.load()) {  // Its client left, or it ran past its time limit.
      return Cancelled("pipeline '" + pipeline.name + "': its request was already answered");
    }
    std::vector<const HookModel*> targets;
    for (const ModelCall& call : calls) {
      const HookModel* target = nullptr;
      for (uint32_t index : pipeline.calls) {
        if (models[index].name == call.model) {
          target = &models[index];
        }
      }
      if (target == nullptr) {
        std::string listed;
        for (const std::string& name : pipeline.manifest().calls) {
          listed += (listed.empty() ? "" : ", ") + name;
        }
        return NotFound("pipeline '" + pipeline.name + "' called model '" + call.model +
                        "'; its [pipeline] calls lists only " + listed);
      }
      targets.push_back(target);
    }
    // The run's first calls queue like new work; once one has answered, the pipeline is under
    // way and its later calls are committed.
    uint32_t meta = run.calls_done > 0 ? run.meta : 0;
    std::vector<std::future<Result<InferResponse>>> futures;
    for (size_t i = 0; i < calls.size(); ++i) {
      futures.push_back(SubmitCall(parent, *targets[i], calls[i], meta));
    }
    CallSlot* slot = t_call;  // Set: PluginInstance::Run serves calls on run()'s thread only.
    int64_t began = slot->started_ns.exchange(0, std::memory_order_acq_rel);
    int64_t wait_start = MonotonicNs();
    for (auto& f : futures) {
      f.wait();  // Always answered: by the worker, its loss, the deadline or stopping.
    }
    int64_t waited = MonotonicNs() - wait_start;
    run.waited_ns += waited;
    if (began != 0) {
      slot->started_ns.store(began + waited, std::memory_order_release);
    }
    run.calls_done += static_cast<int>(calls.size());
    std::vector<std::vector<OwnedTensor>> outputs;
    std::optional<Error> failed;
    for (size_t i = 0; i < futures.size(); ++i) {
      Result<InferResponse> r = futures[i].get();
      if (!r.ok()) {
        if (!failed) {
          failed = Error{r.error().code, "pipeline '" + pipeline.name + "': model '" +
                                             targets[i]->name + "': " + r.error().message};
        }
        continue;
      }
      RequestTimings& t = parent->timings;
      t.queue_ns += r->timings.queue_ns;
      t.compute_ns += r->timings.compute_ns;
      t.batch_size = std::max(t.batch_size, r->timings.batch_size);
      outputs.push_back(std::move(r->outputs));
    }
    if (failed) {
      return *failed;
    }
    return outputs;
  }

  // Queues one model call of pipeline request `parent` (its inputs copied before this
  // returns); the future is always set.
  std::future<Result<InferResponse>> SubmitCall(const PendingPtr& parent, const HookModel& target,
                                                const ModelCall& call, uint32_t meta) {
    auto promise = std::make_shared<std::promise<Result<InferResponse>>>();
    std::future<Result<InferResponse>> future = promise->get_future();
    auto p = std::make_shared<Pending>();
    p->done = [promise](Result<InferResponse> r) { promise->set_value(std::move(r)); };
    p->start_ns = MonotonicNs();
    p->deadline_ns = parent->deadline_ns;
    p->trace_high = parent->trace_high;
    p->trace_low = parent->trace_low;
    p->priority = parent->priority;
    p->tenant = parent->tenant;
    p->parent = parent;
    p->subcall = true;
    p->meta = meta;
    p->model = &target;
    pending_count.fetch_add(1, std::memory_order_relaxed);
    if (target.failure) {
      Answer(p,
             Unavailable("model '" + target.name + "' failed to load: " + target.failure->message));
      return future;
    }
    std::vector<TensorMeta> given;
    for (const TensorView& t : call.inputs) {
      given.push_back({t.name, t.dtype, t.shape, t.bytes.size()});  // Valid during the call.
    }
    Result<std::vector<size_t>> order = OrderByName(target.name, target.manifest().inputs, given);
    if (!order.ok()) {
      Answer(p, order.error());
      return future;
    }
    std::vector<TensorMeta> ordered;
    std::vector<std::span<const uint8_t>> bytes;
    for (size_t g : *order) {
      ordered.push_back(given[g]);
      bytes.push_back(call.inputs[g].bytes);
    }
    Status routed = Route(p, ordered, bytes);
    if (!routed.ok()) {
      Answer(p, routed.error());
    }
    return future;
  }

  // --- Transport thread ---
  void TransportLoop() {
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
      CheckCallTimeouts(now);
      ReturnToken();
      if (!busy && options.spin_ns > 0 && pending_count.load(std::memory_order_relaxed) == 1 &&
          SpinForWork()) {
        continue;  // The answer of the only request pending, caught without sleeping.
      }
      if (!busy) {
        transport_idle.store(true, std::memory_order_relaxed);
        bool quiet = pending_count.load(std::memory_order_relaxed) == 0;
        int64_t wait = quiet ? std::min(kQuietWaitNs, options.stale_status_ns / 4) : kIdleWaitNs;
        shm::WaitForWork(
            segment, slot, [this] { return HasWork(); }, std::max(wait, kIdleWaitNs), 200);
        transport_idle.store(false, std::memory_order_relaxed);
      }
    }
  }

  // Polls HasWork for up to options.spin_ns; true when work came.
  bool SpinForWork() {
    int64_t until = MonotonicNs() + options.spin_ns;
    while (MonotonicNs() < until) {
      if (HasWork()) {
        return true;
      }
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    return HasWork();
  }

  bool HasWork() {
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

  bool TakeHandoff() {
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
  shm::DescriptorData Addressed(shm::DescriptorKind kind, uint64_t sequence, size_t model) const {
    shm::DescriptorData d{};
    d.kind = static_cast<uint16_t>(kind);
    d.slot = slot;
    d.generation = generation;
    d.sender_generation = generation;
    d.sequence = sequence;
    d.model = static_cast<uint16_t>(model);
    return d;
  }

  // From the thread firing InferRequest::cancel: answers `p` CANCELLED and has the transport
  // take back what it sent of it.
  void Cancel(const PendingPtr& p);

  void RefreshViews(int64_t now);
  // A worker's status has not yet been read whole, within options.stale_status_ns of the first
  // read.
  bool Unseen(int64_t now) const {
    return now - first_view_ns < options.stale_status_ns &&
           std::any_of(workers.begin(), workers.end(),
                       [](const WorkerState& w) { return w.read_ok_ns == 0; });
  }
  bool SendWaiting(int64_t now);
  void SendCancels();
  bool PollCompletions();
  void CompletePiece(const PendingPtr& p, Piece& piece);
  bool PushReleases();
  void CheckWorkerRestarts();
  void CheckCallTimeouts(int64_t now);

  static thread_local CallSlot* t_call;
};

thread_local CallSlot* HookHost::Impl::t_call = nullptr;

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
    // than taken for not ready, for up to options.stale_status_ns either way.
    bool settling = ws.read_ok_ns != 0 ? current == ws.view_generation &&
                                             now - ws.read_ok_ns < options.stale_status_ns
                                       : now - first_view_ns < options.stale_status_ns;
    if (!st.ok() && settling) {
      continue;
    }
    if (st.ok()) {
      ws.read_ok_ns = now;
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
        if (name == models[m].name &&
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
        gateway.Choose(static_cast<int>(model), p->model->name, p->output_bytes, candidates);
    if (!chosen.ok()) {
      // UNAVAILABLE (none ready, or none ready has the model) may only mean a worker not yet
      // seen; RESOURCE_EXHAUSTED is a full queue or arena, answered as such.
      if (ring_full || (unseen && chosen.error().code == ErrorCode::kUnavailable)) {
        ++it;  // Waits for ring space, or a first whole status (or its deadline).
      } else {
        drop(chosen.error());
      }
      continue;
    }
    size_t w = *chosen;
    p->worker = w;
    for (size_t i = 0; i < p->pieces.size(); ++i) {
      Piece& piece = p->pieces[i];
      piece.sequence = next_sequence++;
      shm::DescriptorData d = Addressed(shm::DescriptorKind::kSubmit, piece.sequence, model);
      d.variant = p->variant;
      d.rows = static_cast<int32_t>(piece.rows);
      d.deadline_ns = p->deadline_ns;
      d.meta = p->meta;
      d.priority = static_cast<uint8_t>(p->priority);
      d.tenant = static_cast<uint16_t>(p->tenant);
      d.trace_id_high = p->trace_high;
      d.trace_id_low = p->trace_low;
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

void HookHost::Impl::CheckCallTimeouts(int64_t now) {
  int64_t limit = options.call_timeout_ms * 1'000'000;
  std::vector<std::pair<PendingPtr, std::string>> overran;
  {
    MutexLock lock(&calls_mutex);
    for (CallSlot& call : calls) {
      int64_t started = call.started_ns.load(std::memory_order_acquire);
      if (started != 0 && call.written_off.load() && !call.spinning &&
          ThreadCpuNs(call.cpu_clock) - call.cpu_at_write_off > kSpinningCpuNs) {
        call.spinning = true;  // Still in its call (started_ns set): the thread is alive.
        spinning.fetch_add(1, std::memory_order_relaxed);
        spdlog::error("hook host slot {}: a plugin {} written off past its limit still burns CPU",
                      slot, call.what);
      }
      if (started == 0 || now - started <= limit || call.written_off.load()) {
        continue;
      }
      call.written_off.store(true);
      call.cpu_at_write_off = ThreadCpuNs(call.cpu_clock);
      call.thread.detach();  // A running call cannot be stopped; it returns, or the host exits.
      stuck.fetch_add(1, std::memory_order_relaxed);
      timed_out.fetch_add(1, std::memory_order_relaxed);
      overran.emplace_back(call.pending, call.what);
    }
  }
  for (auto& [p, what] : overran) {
    StartThread();  // A stand-in, so the pool keeps its size.
    if (p->model->pipeline() && !p->subcall) {
      ReleaseRun(p);  // Its run slot goes to the next run.
    }
    spdlog::error("hook host slot {}: model '{}': plugin {} ran past call_timeout_ms ({} ms)", slot,
                  p->model->name, what, options.call_timeout_ms);
    Post([this, p = p, what = what] {
      Answer(p, DeadlineExceeded("model '" + p->model->name + "': plugin " + what +
                                 " ran past call_timeout_ms (" +
                                 std::to_string(options.call_timeout_ms) + " ms)"));
    });
  }
}

HookHost::HookHost(const shm::Segment& segment, uint32_t hookhost,
                   const std::vector<HookModel>& models, HookHostOptions options)
    : impl_(std::make_unique<Impl>(segment, hookhost, models, std::move(options))) {
  MutexLock lock(&impl_->cancel_gate->mu);
  impl_->cancel_gate->impl = impl_.get();
}

void HookHost::Start() {
  for (int i = 0; i < impl_->options.threads; ++i) {
    impl_->StartThread();
  }
  impl_->transport = std::thread([this] { impl_->TransportLoop(); });
}

HookHost::~HookHost() {
  Impl& impl = *impl_;
  {
    MutexLock lock(&impl.cancel_gate->mu);  // No cancel runs from now on.
    impl.cancel_gate->impl = nullptr;
  }
  impl.stopping.store(true, std::memory_order_release);
  impl.WakeTransport();
  if (impl.transport.joinable()) {
    impl.transport.join();
  }
  // What never reached a worker, or never came back, is answered now: a pipeline run waiting
  // for its model calls returns, so its thread can be joined. Hand-offs from now on are
  // answered at once.
  Error stopping = Unavailable("the hook host is stopping");
  {
    MutexLock lock(&impl.handoff_mutex);
    impl.handoff_closed = true;
  }
  // A thread still sending its own hand-off finishes first; nobody takes the token after.
  while (!impl.TryTakeToken()) {
    std::this_thread::yield();
  }
  {
    MutexLock lock(&impl.handoff_mutex);
    for (PendingPtr& p : impl.outbox) {
      impl.waiting.push_back(std::move(p));
    }
    impl.outbox.clear();
  }
  for (PendingPtr& p : impl.waiting) {
    impl.Answer(p, stopping);
  }
  for (auto& [sequence, entry] : impl.inflight) {
    impl.Answer(entry.first, stopping);
  }
  std::deque<QueuedRun> runs;
  {
    MutexLock lock(&impl.runs_mutex);
    runs.swap(impl.runs_waiting);
  }
  for (QueuedRun& run : runs) {
    impl.Answer(run.pending, stopping);
  }
  {
    // A hook thread between its predicate check and its wait holds the lock: taking it here
    // means every thread has either seen `stopping` or is waiting for this notification.
    MutexLock lock(&impl.pool_mutex);
  }
  impl.pool_cv.notify_all();
  {
    MutexLock lock(&impl.calls_mutex);
    for (CallSlot& call : impl.calls) {
      if (call.thread.joinable()) {
        lock.Unlock();
        call.thread.join();
        lock.Lock();
      }
    }
  }
  // The releases the pool queued last go back to the workers (their blocks are lent).
  impl.TakeHandoff();
  impl.PushReleases();
}

void HookHost::RunOnHookThread(std::function<void()> task) { impl_->Post(std::move(task)); }

size_t HookHost::pending() const { return impl_->pending_count.load(std::memory_order_relaxed); }
bool HookHost::healthy() const {
  return impl_->stuck.load(std::memory_order_relaxed) < impl_->options.threads;
}
void HookHost::CountRefused(const HookModel* model, const Error& error) {
  impl_->Count(model, 0, error.code, 0);
}

bool HookHost::wants_restart() const { return impl_->spinning.load(std::memory_order_relaxed) > 0; }

uint64_t HookHost::timed_out_calls() const {
  return impl_->timed_out.load(std::memory_order_relaxed);
}

std::future<Result<InferResponse>> HookHost::Submit(InferRequest request) {
  auto promise = std::make_shared<std::promise<Result<InferResponse>>>();
  std::future<Result<InferResponse>> future = promise->get_future();
  Submit(std::move(request),
         [promise](Result<InferResponse> result) { promise->set_value(std::move(result)); });
  return future;
}

void HookHost::Submit(InferRequest request, InferCallback done) {
  Impl& impl = *impl_;
  int64_t start = MonotonicNs();
  auto p = std::make_shared<Pending>();
  p->done = std::move(done);
  p->start_ns = start;
  p->deadline_ns = request.deadline_ns;
  p->trace_high = request.trace_id_high;
  p->trace_low = request.trace_id_low;
  p->priority = request.priority;
  p->tenant = request.tenant;
  if (impl.pending_count.fetch_add(1, std::memory_order_relaxed) >= impl.options.max_pending) {
    impl.Answer(p, ResourceExhausted("hook host: " + std::to_string(impl.options.max_pending) +
                                     " requests pending, its limit (retry in " +
                                     std::to_string(kRetryAfterMs) + " ms)"));
    return;
  }
  if (impl.stopping.load()) {
    impl.Answer(p, Unavailable("the hook host is stopping"));
    return;
  }
  auto model = std::find_if(impl.models.begin(), impl.models.end(),
                            [&](const HookModel& m) { return m.name == request.model; });
  if (model == impl.models.end()) {
    impl.Answer(p, NotFound("model '" + request.model + "' is not in the repository"));
    return;
  }
  if (model->failure) {
    impl.Answer(
        p, Unavailable("model '" + model->name + "' failed to load: " + model->failure->message));
    return;
  }
  p->model = &*model;
  if (p->priority > shm::kMaxPriority || p->tenant > shm::kMaxTenants) {
    std::string what = "priority " + std::to_string(p->priority) + " (0.." +
                       std::to_string(shm::kMaxPriority) + "), tenant " +
                       std::to_string(p->tenant) + " (0.." + std::to_string(shm::kMaxTenants) + ")";
    p->tenant = 0;  // Counted under no tenant.
    impl.Answer(p, InvalidArgument("model '" + model->name + "': out of range: " + what));
    return;
  }
  if (request.cancel != nullptr) {
    request.cancel->Subscribe([gate = impl.cancel_gate, weak = std::weak_ptr<Pending>(p)] {
      MutexLock lock(&gate->mu);
      PendingPtr pending = weak.lock();
      if (gate->impl != nullptr && pending != nullptr) {
        gate->impl->Cancel(pending);
      }
    });
  }
  bool pipeline = model->pipeline();  // Its client tensors are its [[inputs]], for its run().
  bool preprocess = pipeline || (model->plugin != nullptr && model->plugin->has_preprocess());
  const std::vector<TensorSpec>& specs =
      preprocess ? model->manifest().client_inputs() : model->manifest().inputs;
  std::vector<TensorMeta> given;
  for (const ClientTensor& t : request.inputs) {
    given.push_back({t.name, t.dtype, t.shape, t.bytes.size()});
  }
  Result<std::vector<size_t>> order = OrderByName(model->name, specs, given);
  if (!order.ok()) {
    impl.Answer(p, order.error());
    return;
  }
  std::vector<TensorMeta> ordered;
  std::vector<std::span<const uint8_t>> bytes;
  for (size_t g : *order) {
    ordered.push_back(given[g]);
    bytes.push_back(request.inputs[g].bytes);
  }
  if (!preprocess) {
    Status routed = impl.Route(p, ordered, bytes);
    p->timings.validate_ns = MonotonicNs() - start;
    if (!routed.ok()) {
      impl.Answer(p, routed.error());
    }
    return;
  }
  std::vector<Shape> declared;
  for (const TensorSpec& spec : specs) {
    declared.push_back(spec.shape);
  }
  int64_t client_rows = 0;
  Status checked = CheckTensors(model->name, specs, declared, ordered, &client_rows);
  if (!checked.ok()) {
    impl.Answer(p, checked.error());
    return;
  }
  std::vector<AllocatedTensor> client;
  std::vector<std::string> names;
  for (size_t i = 0; i < ordered.size(); ++i) {
    std::optional<AllocatedTensor> block = impl.AllocateTensor(
        ordered[i].dtype, Shape(ordered[i].shape.begin(), ordered[i].shape.end()));
    if (!block) {
      std::vector<uint64_t> blocks;
      for (const AllocatedTensor& t : client) {
        blocks.push_back(t.block);
      }
      impl.FreeBlocks(blocks);
      impl.Answer(p, ResourceExhausted("model '" + model->name +
                                       "': this hook host's arena is full (retry in " +
                                       std::to_string(kRetryAfterMs) + " ms)"));
      return;
    }
    std::memcpy(block->bytes.data(), bytes[i].data(), bytes[i].size());
    client.push_back(*block);
    names.push_back(specs[i].name);
  }
  p->timings.validate_ns = MonotonicNs() - start;
  if (pipeline) {
    impl.AdmitRun({p, std::move(client), std::move(names)});
    return;
  }
  impl.Post([&impl, p, client = std::move(client), names = std::move(names)]() mutable {
    impl.Preprocess(p, std::move(client), std::move(names));
  });
}

}  // namespace ferry::hookhost
