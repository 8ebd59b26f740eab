// A hook host's request flow, as the front end calls it (in process): Submit a request, get
// its response or error once, on a hook thread (or the transport thread: see Threads).
//
//   validate against the manifest (model, dtype, shape, rows) -> input tensors written into
//   this hook host's arena -> preprocess on the hook thread pool -> split when larger than the
//   largest compiled size (all pieces or none) -> worker chosen (gateway.h) -> descriptors
//   pushed -> completions -> pieces joined -> postprocess -> response -> blocks released.
//
// A pipeline request runs its plugin's run() on a hook thread; each model call it makes
// follows the flow above from "split" on, without the callee's hooks, and is answered on the
// transport thread (so runs waiting on every hook thread cannot deadlock). A run's first
// calls queue like new work; its later calls are committed (DescriptorData::meta): the
// worker dispatches them ahead of new work, at most one per run queued at a time.
//
// Threads: `threads` hook threads run validation, plugins, joining and the callbacks, except
// that an answer with no postprocess to run and at most 4 KiB of outputs is joined and
// answered on the transport thread, one hand-off fewer (so a callback must not block); one
// transport thread owns every ring (it alone pushes submissions and releases and pops
// completions; at light load, with the transport thread idle and one request pending, the
// submitting thread borrows its token and sends that request itself, a wake-up fewer:
// docs/hookhost.md "Threads"), reads the workers' status snapshots for the gateway, notices workers
// that restarted (their pieces fail UNAVAILABLE) and plugin calls past their time limit (their
// request fails DEADLINE_EXCEEDED; the stuck thread is replaced).
//
// Memory: every block this hook host allocates is freed exactly once: input blocks when the
// worker has answered the piece that reads them, plugin output blocks once copied into the
// response, a worker's output blocks released back to it after they were read.
//
// Cancellation (InferRequest::cancel): the request is answered CANCELLED at once; a piece
// already sent is followed by a kCancel descriptor, and the worker drops it if it is still
// queued (else it runs and its answer is discarded). A pipeline's model calls in flight are
// cancelled with it, and its run's next host->call fails.
//
// Counting: every client request answered, by model, tenant and outcome, and its plugins'
// time, in this hook host's shared-memory counters (shm::FrontEndCountersData; ferryd serves
// them as ferry_frontend_* metrics).
//
// Thread safety: Submit, CountRefused, pending() and healthy() are safe from any thread.
// Start once.
// Lifetimes: the segment and the models outlive the HookHost; the destructor stops the
// threads, hands the last releases to the workers and answers every pending request
// UNAVAILABLE. A plugin call written off past its time limit must not return after that (its
// thread is detached): a process with such a call exits instead of destroying its HookHost,
// as ferry-hookhost does.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/cancel_signal.h"
#include "common/mutex.h"
#include "common/priority.h"
#include "common/result.h"
#include "config/node_config.h"
#include "hookhost/hook_models.h"
#include "hookhost/tenant_limits.h"
#include "shm/segment.h"

namespace ferry::hookhost {

struct ClientTensor {
  std::string name;
  DType dtype = DType::kF32;
  Shape shape;
  std::span<const uint8_t> bytes;  // Read only during Submit (copied into the arena).
};

struct InferResponse;

struct InferRequest {
  // The model, as the caller resolved it: one of this host's models (HookHost::Find resolves a
  // name). nullptr: a model it does not serve (NOT_FOUND, counted as unrouted).
  const HookModel* model = nullptr;
  std::vector<ClientTensor> inputs;
  int64_t deadline_ns = 0;  // CLOCK_MONOTONIC (common/clock.h); 0 = none.
  uint64_t trace_id_high = 0;
  uint64_t trace_id_low = 0;
  // A level (common/priority.h): the worker dispatches a model's queued requests by level,
  // then age. REQUIRES: kHighestPriority..kLowestPriority (PriorityFromParameter is the check
  // of a client's value).
  Priority priority = kDefaultPriority;
  // The node's tenant number (1-based into [frontend] tenants), 0 = none. Beyond
  // shm::kMaxTenants: INVALID_ARGUMENT.
  uint32_t tenant = 0;
  // Triton's sequence_id (0: none), sequence_start and sequence_end: a request of a stateful
  // model's sequence (Manifest::stateful), sent to the worker holding that sequence. Refused
  // (INVALID_ARGUMENT) for any other model, and a stateful model's request needs one.
  uint64_t sequence_id = 0;
  bool sequence_start = false;
  bool sequence_end = false;
  // Fired when the client leaves: the request is answered CANCELLED at once, and its pieces
  // still queued at a worker are taken out of the queue there (counted as cancelled).
  std::shared_ptr<CancelSignal> cancel;
  // A decoupled pipeline's responses (Manifest::decoupled): each one its run() sends, on the
  // hook thread running it, in order, before the final answer through the InferCallback (with
  // no outputs). An error (the client gone) is handed to the plugin, which should stop.
  // Requests for a decoupled model without it are refused INVALID_ARGUMENT.
  std::function<Status(InferResponse)> on_response;
};

using ResponseTensor = OwnedTensor;

// Where a request's time went. The worker's figures are what it reported. For a pipeline:
// queue and compute summed over its model calls, postprocess_ns its whole run, plugin_ns the
// run's own time (not its waits), pieces the model calls it made.
struct RequestTimings {
  int64_t validate_ns = 0;     // Manifest checks and the copy into the arena.
  int64_t preprocess_ns = 0;   // The plugin's preprocess (0 without one).
  int64_t queue_ns = 0;        // At the worker, before its batch began (the longest piece).
  int64_t compute_ns = 0;      // Its batches' execution (summed over pieces).
  int64_t postprocess_ns = 0;  // Joining and the plugin's postprocess.
  int64_t plugin_ns = 0;       // Inside plugin calls (preprocess and postprocess).
  int64_t total_ns = 0;        // Submit to the response.
  int64_t batch_size = 0;      // The compiled size it ran in (the largest piece's).
  int pieces = 0;
};

struct InferResponse {
  std::vector<ResponseTensor> outputs;  // In the order of the model's client outputs.
  RequestTimings timings;
};

using InferCallback = std::function<void(Result<InferResponse>)>;

struct HookHostOptions {
  GatewayMode gateway = GatewayMode::kLeastOutstanding;
  int threads = 4;
  int64_t call_timeout_ms = 1000;
  size_t max_pending = 4096;
  std::vector<uint64_t> max_queue_depth;  // Per model (the scheduler's limit at the workers).
  // With one request pending and nothing to do, the transport thread polls this long for its
  // answer before it sleeps (a wake-up saved at light load, a core's time spent). 0: never.
  int64_t spin_ns = 0;
  // A worker status that cannot be read whole for this long (a writer that died mid-publish)
  // makes its worker ineligible; shorter, its last view stands (a writer preempted between its
  // two stores). Tests lengthen it so a loaded machine cannot outlast it by accident.
  int64_t stale_status_ns = 100'000'000;
  // A worker whose heartbeat has not advanced for this long is stalled: the gateway sends it
  // requests only when no responsive worker can take them (gateway.h), and the requests it
  // holds unanswered are sent again to one that can (Impl::RerouteStalled). Workers beat at
  // least every 100 ms at rest and on every dispatch turn. ferry-hookhost sets it from
  // [gateway] stall_ms; this default suits tests on a loaded machine.
  int64_t stall_ns = 1'000'000'000;
  // [tenants.NAME] max_queued and rate by tenant number (tenant_limits.h); none when empty.
  std::vector<TenantLimit> tenant_limits;
};

class HookHost {
 public:
  // REQUIRES: `segment` attached as hook host `hookhost`'s slot; `models` in wire order.
  HookHost(const shm::Segment& segment, uint32_t hookhost, const std::vector<HookModel>& models,
           HookHostOptions options);
  ~HookHost();
  HookHost(const HookHost&) = delete;
  HookHost& operator=(const HookHost&) = delete;

  // Starts the threads (after the sandbox: it applies only to threads started later).
  void Start();
  // `done` runs exactly once, on a hook thread or the transport thread (or here, for a request
  // refused at once, or cancelled on the firing thread). It must not block.
  void Submit(InferRequest request, InferCallback done);
  std::future<Result<InferResponse>> Submit(InferRequest request);
  // The model named `name` that this host serves (loaded or failed), or nullptr.
  const HookModel* Find(std::string_view name) const;

  // Requests submitted and not yet answered.
  size_t pending() const;
  // False once `threads` plugin calls are stuck past their limit: restart this process.
  bool healthy() const;
  // True once a plugin call has run past call_timeout_ms: such a call cannot be stopped in
  // this process (a spinning one takes a core from every other request, a sleeping one a
  // thread), so the process should drain and be restarted, which is what stops it.
  bool wants_restart() const;
  // The wire index of the model whose plugin call ran past its limit last (-1: none), for
  // ferryd to count against that plugin.
  int faulted_model() const;
  // A request for `model` the front end refused before submitting it (unparsable, a bad
  // parameter; nullptr: a model not served): counted with the answered ones
  // (shm::FrontEndCountersData).
  void CountRefused(const HookModel* model, const Error& error);
  // Plugin calls that ran past call_timeout_ms.
  uint64_t timed_out_calls() const;
  // Runs `task` on a hook thread, after the tasks queued before it (the front end's parsing
  // of large or compressed bodies, kept off its I/O thread). A task queued when the host
  // stops still runs before the threads end. Safe from any thread.
  void RunOnHookThread(std::function<void()> task);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace ferry::hookhost
