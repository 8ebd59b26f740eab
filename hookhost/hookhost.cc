// HookHost: answers, hand-offs to the transport, and the public entry points.
#include "hookhost/hookhost.h"

#include <pthread.h>
#include <spdlog/spdlog.h>
#include <time.h>

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "common/clock.h"
#include "common/thread_name.h"
#include "hookhost/hookhost_impl.h"
#include "hookhost/request_checks.h"
#include "shm/recovery.h"

namespace ferry::hookhost {

// Answers `p` once: the callback runs on the calling thread. `plugin_ns` (counted as its
// plugins' time) defaults to what the result, or for an error `p`, says; a thread that
// does not own `p`'s timings (a cancel) passes 0.
void HookHost::Impl::Answer(const PendingPtr& p, Result<InferResponse> result, int64_t plugin_ns) {
  if (p->answered.exchange(true)) {
    return;
  }
  pending_count.fetch_sub(1, std::memory_order_relaxed);
  if (p->in_flight) {
    limiter.Release(p->tenant);
  }
  if (!p->subcall) {
    if (plugin_ns < 0) {
      plugin_ns = result.ok() ? result->timings.plugin_ns : p->timings.plugin_ns;
    }
    std::optional<ErrorCode> code = result.ok() ? std::nullopt : std::optional(result.error().code);
    Count(p->model, p->tenant, code, plugin_ns);
    uint32_t level = p->priority == 0 ? kDefaultPriority : p->priority;
    counters
        .priority_answered[std::min<uint32_t>(level, kLowestPriority)]
                          [code ? static_cast<size_t>(*code) + 1 : 0]
        .fetch_add(1, std::memory_order_relaxed);
  }
  p->done(std::move(result));
}

// A client request answered: its outcome (nullopt: success) and its plugins' time.
void HookHost::Impl::Count(const HookModel* model, uint32_t tenant, std::optional<ErrorCode> code,
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

void HookHost::Impl::Post(std::function<void()> task) {
  {
    MutexLock lock(&pool_mutex);
    tasks.push_back(std::move(task));
  }
  pool_cv.notify_one();
}

void HookHost::Impl::WakeTransport() {
  handoff_waiting.store(true, std::memory_order_release);
  self_waker.Notify();
}

void HookHost::Impl::Handoff(const PendingPtr& p) {
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
void HookHost::Impl::AnswerLater(const PendingPtr& p, Error error) {
  if (p->subcall) {
    Answer(p, std::move(error));
  } else {
    Post([this, p, e = std::move(error)] { Answer(p, e); });
  }
}

void HookHost::Impl::FreeBlocks(const std::vector<uint64_t>& blocks) {
  MutexLock lock(&arena_mutex);
  for (uint64_t b : blocks) {
    (void)arena.Free(b);
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
  impl_->transport = std::thread([this] {
    NameThisThread("ferry-transport");
    impl_->TransportLoop();
  });
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

bool HookHost::wants_restart() const {
  return impl_->timed_out.load(std::memory_order_relaxed) > 0;
}

int HookHost::faulted_model() const { return impl_->faulted_model.load(std::memory_order_relaxed); }

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

namespace {

// A sequence only for a stateful model, and always for one (before any work is spent on it).
Status CheckSequence(const Pending& p, const HookModel& model) {
  bool carries = p.sequence_id != 0 || p.sequence_flags != 0;
  if (!model.manifest().stateful()) {
    if (carries) {
      return InvalidArgument("model '" + model.name +
                             "' keeps no state: a request to it may "
                             "not carry a sequence (sequence_id, sequence_start or "
                             "sequence_end)");
    }
    return OkStatus();
  }
  if (p.sequence_id == 0) {
    return InvalidArgument("model '" + model.name +
                           "' is stateful: every request needs a "
                           "non-zero integer sequence_id (and sequence_start on a sequence's "
                           "first)");
  }
  return OkStatus();
}

}  // namespace

Status HookHost::Impl::Admit(const PendingPtr& p, const HookModel* model) {
  if (pending_count.fetch_add(1, std::memory_order_relaxed) >= options.max_pending) {
    return ResourceExhausted("hook host: " + std::to_string(options.max_pending) +
                             " requests pending, its limit (retry in " +
                             std::to_string(kRetryAfterMs) + " ms)");
  }
  if (stopping.load()) {
    return Unavailable("the hook host is stopping");
  }
  if (model == nullptr) {
    return NotFound("the request names a model this hook host does not serve");
  }
  p->model = model;  // Counted under its model from here on, refusals included.
  if (model->failure) {
    return Unavailable("model '" + model->name + "' failed to load: " + model->failure->message);
  }
  if (p->tenant > shm::kMaxTenants) {
    std::string what =
        "tenant " + std::to_string(p->tenant) + " (0.." + std::to_string(shm::kMaxTenants) + ")";
    p->tenant = 0;  // Counted under no tenant.
    return InvalidArgument("model '" + model->name + "': out of range: " + what);
  }
  FERRY_RETURN_IF_ERROR(CheckSequence(*p, *model));
  if (model->manifest().decoupled && !p->on_response) {  // Before a rate token is spent.
    return InvalidArgument("model '" + model->name +
                           "' is decoupled (many responses per request): call it over gRPC "
                           "ModelStreamInfer");
  }
  FERRY_RETURN_IF_ERROR(limiter.Admit(p->tenant, MonotonicNs()));
  p->in_flight = true;
  return OkStatus();
}

void HookHost::Impl::Accept(const PendingPtr& p, std::span<const ClientTensor> inputs) {
  const HookModel* model = p->model;
  bool pipeline = model->pipeline();  // Its client tensors are its [[inputs]], for its run().
  bool preprocess = pipeline || (model->plugin != nullptr && model->plugin->has_preprocess());
  const std::vector<TensorSpec>& specs =
      preprocess ? model->manifest().client_inputs() : model->manifest().request_inputs();
  std::vector<TensorMeta> given;
  for (const ClientTensor& t : inputs) {
    given.push_back({t.name, t.dtype, t.shape, t.bytes.size()});
  }
  Result<std::vector<size_t>> order = OrderByName(model->name, specs, given);
  if (!order.ok()) {
    Answer(p, order.error());
    return;
  }
  std::vector<TensorMeta> ordered;
  std::vector<std::span<const uint8_t>> bytes;
  for (size_t g : *order) {
    ordered.push_back(given[g]);
    bytes.push_back(inputs[g].bytes);
  }
  if (!preprocess) {
    Status routed = Route(p, ordered, bytes);
    p->timings.validate_ns = MonotonicNs() - p->start_ns;
    if (!routed.ok()) {
      Answer(p, routed.error());
    }
    return;
  }
  std::optional<std::vector<AllocatedTensor>> client = StageClientTensors(p, specs, ordered, bytes);
  if (!client) {
    return;
  }
  std::vector<std::string> names;
  for (size_t i = 0; i < client->size(); ++i) {
    names.push_back(specs[i].name);
  }
  p->timings.validate_ns = MonotonicNs() - p->start_ns;
  if (pipeline) {
    AdmitRun({p, std::move(*client), std::move(names)});
    return;
  }
  Post([this, p, client = std::move(*client), names = std::move(names)]() mutable {
    Preprocess(p, std::move(client), std::move(names));
  });
}

std::optional<std::vector<AllocatedTensor>> HookHost::Impl::StageClientTensors(
    const PendingPtr& p, const std::vector<TensorSpec>& specs, std::span<const TensorMeta> ordered,
    std::span<const std::span<const uint8_t>> bytes) {
  const HookModel* model = p->model;
  std::vector<Shape> declared;
  for (const TensorSpec& spec : specs) {
    declared.push_back(spec.shape);
  }
  int64_t client_rows = 0;
  Status checked = CheckTensors(model->name, specs, declared, ordered, &client_rows);
  for (size_t i = 0; i < ordered.size() && checked.ok(); ++i) {
    if (ordered[i].dtype == DType::kBytes) {  // Its size is its data's: each element checked.
      checked = CheckBytesTensor(bytes[i], ElementCount(ordered[i].shape).value_or(0));
      if (!checked.ok()) {
        checked = InvalidArgument("model '" + model->name + "': input '" + specs[i].name +
                                  "': " + checked.error().message);
      }
    }
  }
  if (!checked.ok()) {
    Answer(p, checked.error());
    return std::nullopt;
  }
  std::vector<AllocatedTensor> client;
  for (size_t i = 0; i < ordered.size(); ++i) {
    std::optional<AllocatedTensor> block = AllocateBlock(
        ordered[i].dtype, Shape(ordered[i].shape.begin(), ordered[i].shape.end()), bytes[i].size());
    if (!block) {
      std::vector<uint64_t> blocks;
      for (const AllocatedTensor& t : client) {
        blocks.push_back(t.block);
      }
      FreeBlocks(blocks);
      Answer(p, ResourceExhausted("model '" + model->name +
                                  "': this hook host's arena is full (retry in " +
                                  std::to_string(kRetryAfterMs) + " ms)"));
      return std::nullopt;
    }
    std::memcpy(block->bytes.data(), bytes[i].data(), bytes[i].size());
    client.push_back(*block);
  }
  return client;
}

const HookModel* HookHost::Find(std::string_view name) const {
  for (const HookModel& m : impl_->models) {
    if (m.name == name) {
      return &m;
    }
  }
  return nullptr;
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
  p->sequence_id = request.sequence_id;
  p->sequence_flags = static_cast<uint8_t>((request.sequence_start ? shm::kSequenceStart : 0) |
                                           (request.sequence_end ? shm::kSequenceEnd : 0));
  p->on_response = std::move(request.on_response);
  if (Status admitted = impl.Admit(p, request.model); !admitted.ok()) {
    impl.Answer(p, admitted.error());
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
  impl.Accept(p, request.inputs);
}

}  // namespace ferry::hookhost
