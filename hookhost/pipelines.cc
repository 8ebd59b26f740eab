// Pipeline requests: admission to a run slot, the run on a hook thread, its model calls.
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

void HookHost::Impl::AdmitRun(QueuedRun run) {
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

void HookHost::Impl::PostRun(QueuedRun run) {
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
void HookHost::Impl::ReleaseRun(const PendingPtr& p) {
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
void HookHost::Impl::RunPipeline(const PendingPtr& p, std::vector<AllocatedTensor> client,
                                 std::vector<std::string> names) {
  const HookModel& model = *p->model;
  const std::vector<TensorSpec>& specs = model.manifest().outputs;
  int64_t start = MonotonicNs();
  std::vector<TensorView> inputs;
  for (size_t i = 0; i < client.size(); ++i) {
    inputs.push_back({names[i], client[i].dtype, client[i].shape, client[i].bytes});
  }
  bool decoupled = model.manifest().decoupled;
  std::vector<std::string> wanted;
  for (const TensorSpec& t : specs) {
    if (!decoupled) {  // A decoupled run answers through send() alone.
      wanted.push_back(t.name);
    }
  }
  ResponseSender send = [this, &p, &model](std::span<const TensorView> tensors) {
    return SendResponse(p, model, tensors);
  };
  uint32_t meta = next_meta.fetch_add(1, std::memory_order_relaxed);
  if (meta == 0) {
    meta = next_meta.fetch_add(1, std::memory_order_relaxed);
  }
  PipelineRun run{p, meta};
  std::vector<AllocatedTensor> produced;
  Status s = WatchedCall(p, "run", &p->timings.plugin_ns, [&] {
    return model.plugin->Run(
        inputs, wanted,
        [this](uint32_t, DType dtype, const Shape& shape) { return AllocateTensor(dtype, shape); },
        [this, &run](std::span<const ModelCall> calls) { return CallModels(run, calls); },
        decoupled ? &send : nullptr, &produced);
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

Status HookHost::Impl::SendResponse(const PendingPtr& p, const HookModel& model,
                                    std::span<const TensorView> tensors) {
  if (p->answered.load()) {  // Cancelled, or timed out.
    return Cancelled("the request was answered already (its client left or its time ran out)");
  }
  if (p->deadline_ns != 0 && MonotonicNs() > p->deadline_ns) {
    return DeadlineExceeded("the request's deadline passed");
  }
  const std::vector<TensorSpec>& specs = model.manifest().outputs;
  InferResponse response;
  for (const TensorView& t : tensors) {
    auto spec = std::find_if(specs.begin(), specs.end(),
                             [&](const TensorSpec& s) { return s.name == t.name; });
    bool fits = spec != specs.end() && FitsSpec(*spec, t.dtype, t.shape);
    bool twice = std::any_of(response.outputs.begin(), response.outputs.end(),
                             [&](const ResponseTensor& r) { return r.name == t.name; });
    if (!fits || twice) {
      return InvalidArgument("output '" + std::string(t.name.substr(0, 64)) + "' " +
                             (twice ? "is sent twice"
                                    : "is not one of the manifest's [[outputs]] "
                                      "with this dtype and shape"));
    }
    response.outputs.push_back({spec->name, t.dtype, t.shape, {t.bytes.begin(), t.bytes.end()}});
  }
  response.timings = p->timings;
  response.timings.total_ns = MonotonicNs() - p->start_ns;
  // Waiting for a slow reader is not the plugin's time: its call_timeout_ms clock stops, as
  // in host->call (the wait itself is bounded: StreamSink).
  CallSlot* slot = t_call;
  int64_t began = slot != nullptr ? slot->started_ns.exchange(0, std::memory_order_acq_rel) : 0;
  int64_t wait_start = MonotonicNs();
  Status sent = p->on_response(std::move(response));
  if (began != 0) {
    slot->started_ns.store(began + (MonotonicNs() - wait_start), std::memory_order_release);
  }
  return sent;
}

// A pipeline run's host->call(): every call submitted at once, then waited for (that time
// is not the plugin's: its call_timeout_ms clock stops meanwhile).
Result<std::vector<std::vector<OwnedTensor>>> HookHost::Impl::CallModels(
    PipelineRun& run, std::span<const ModelCall> calls) {
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
std::future<Result<InferResponse>> HookHost::Impl::SubmitCall(const PendingPtr& parent,
                                                              const HookModel& target,
                                                              const ModelCall& call,
                                                              uint32_t meta) {
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
  if (target.manifest().stateful()) {
    Answer(p, InvalidArgument("model '" + target.name +
                              "' is stateful: a pipeline's call carries no sequence"));
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

}  // namespace ferry::hookhost
