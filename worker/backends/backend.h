// DESIGN: the interface between the dispatch loop and whatever runs models (CpuBackend, the
// reference executor; SimBackend, which spends time by a cost model; CudaBackend on a GPU).
//
// A backend loads a bundle into one executable per (shape variant, compiled batch size) and
// executes one coalesced batch at a time. It gathers each request's input rows itself and
// writes each request's output rows straight into that request's block, so a GPU backend can
// copy host-to-device directly from the shared-memory arena with no host-side concatenation.
// Compute time is reported apart from any weight-load time (the scheduler learns costs from
// compute time only). A model that fails to load or run is marked failed with its error;
// other models keep serving.
//
// Thread safety: requires external synchronization (the dispatch loop is the only caller).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "model/bundle.h"

namespace ferry {

using ModelHandle = int;

// One request's part of a batch, in manifest order of inputs and outputs.
struct RequestIo {
  int64_t rows = 1;
  // Each input's bytes for this request: its rows along the batch axis (or the whole tensor
  // for an input without one, used from the first request only).
  std::vector<std::span<const uint8_t>> inputs;
  // Where each output's rows for this request go (rows x the output's row size).
  std::vector<std::span<uint8_t>> outputs;
};

struct BatchJob {
  int variant = 0;
  int64_t batch_size = 0;  // Compiled size; the rows beyond the requests' are zero padding.
  std::vector<RequestIo> requests;
};

struct ExecutionTiming {
  double compute_seconds = 0;  // The model's execution, copies in and out included.
  double load_seconds = 0;     // Weight loading this dispatch triggered (excluded from cost).
  int64_t started_ns = 0;      // CLOCK_MONOTONIC when the batch started executing (0: unknown).
  int64_t finished_ns = 0;     // CLOCK_MONOTONIC when it finished (common/clock.h).
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Builds the executables of every (variant, compiled size). The bundle must outlive the
  // model. On failure the model is registered as failed and the error returned.
  virtual Result<ModelHandle> Load(const Bundle& bundle) = 0;
  // Runs one batch. INVALID_ARGUMENT for a malformed job (wrong counts or byte sizes);
  // the model's load error if it failed; INTERNAL for a backend fault.
  // Lifetime: the job's spans must stay valid until Execute returns, and no backend touches
  // them after it returns, on success or on error (a GPU backend waits for its queued copies
  // before returning an error).
  virtual Result<ExecutionTiming> Execute(ModelHandle model, const BatchJob& job) = 0;
  // OK, or the error that made the model fail.
  virtual Status ModelStatus(ModelHandle model) const = 0;
  // Frees the model's executables and weights; its handle stays taken and fails from now on.
  // REQUIRES: no batch in flight (the dispatch loop unloads between batches).
  virtual void Unload(ModelHandle model) { (void)model; }

  // Asynchronous execution, so the dispatch loop drains rings and plans while batches run.
  // Batches execute one at a time in the order begun; up to MaxInFlight() may be begun and
  // not yet finished (a second one queued behind the first starts the moment it ends, as a
  // kernel queued on a stream does). Begin queues `job` (an error means it was not queued);
  // Ready() tells without blocking whether the oldest finished; Finish() waits for the
  // oldest and returns what Execute would have. The default runs Execute inside Begin.
  // REQUIRES: Begin only with fewer than MaxInFlight() in flight; Ready/Finish only with
  // one in flight.
  // Lifetime: each job and the bytes its spans name stay valid until its Finish returns.
  virtual int MaxInFlight() const { return 1; }
  virtual Status Begin(ModelHandle model, const BatchJob& job);
  virtual bool Ready() const { return true; }
  virtual Result<ExecutionTiming> Finish();
  // Runs `job` to its end on the calling thread, for a caller that would only wait for it
  // (DispatchLoopOptions::run_here_max_ns): Ready() is then true and Finish() returns its
  // result, as after Begin. The default is Begin. REQUIRES: none in flight.
  virtual Status RunHere(ModelHandle model, const BatchJob& job) { return Begin(model, job); }
  // Called from the backend's own thread when an in-flight batch finishes, so a loop asleep
  // on its doorbell wakes. Set before the first Begin.
  void SetNotifier(std::function<void()> notify) { notify_ = std::move(notify); }
  // True when batches run on the host's own CPUs (the CPU backend), which the hook hosts and
  // clients share: the dispatch loop then decides a batch only when the one before it has
  // finished (dispatch_loop.h, "Planning ahead").
  virtual bool RunsOnHostCpus() const { return false; }
  // Nanoseconds until the in-flight batch should finish, when the backend knows (sim); -1
  // when it does not (the loop then sleeps until notified).
  virtual int64_t ExpectedRemainingNs() const { return -1; }
  // False after a fault the process cannot recover from (a lost CUDA context): the worker
  // reports unhealthy and exits non-zero so the supervisor restarts it.
  virtual bool Healthy() const { return true; }
  virtual uint64_t DeviceMemoryInUse() const { return 0; }

  // Residency (worker/weight_residency.h): a model's weights may leave memory and come back
  // while its handle stays valid. WeightBytes is what the model holds resident once loaded.
  // ReleaseWeights frees them (its batches then fail with UNAVAILABLE); RestoreWeights
  // builds them again from the bundle (an error leaves the model released, not failed).
  // Thread safety: RestoreWeights may run on a thread of its own while batches of other models
  // execute, but never beside Load, Unload or anything else on the same model; the rest on
  // the loop's thread with no batch of that model in flight.
  virtual bool SupportsResidency() const { return false; }
  // The budget a worker uses when [worker] weight_budget is not set: 0 keeps every model
  // resident (the CPU backend: host memory has no fixed size); a GPU backend's weight arena.
  virtual uint64_t DefaultWeightBudget() const { return 0; }
  virtual uint64_t WeightBytes(ModelHandle model) const {
    (void)model;
    return 0;
  }
  virtual void ReleaseWeights(ModelHandle model) { (void)model; }
  virtual Status RestoreWeights(ModelHandle model) {
    (void)model;
    return OkStatus();
  }

 protected:
  // Execute, with the timing's started_ns and finished_ns set when it left them 0.
  Result<ExecutionTiming> ExecuteTimed(ModelHandle model, const BatchJob& job);

  std::function<void()> notify_;

 private:
  std::optional<Result<ExecutionTiming>> finished_;  // The default Begin's result.
};

// Checks a job against the manifest before any backend touches its bytes: variant and size
// compiled, rows summing to at most the size, and every span exactly the bytes its shape
// needs. Backends call this first.
Status ValidateJob(const Manifest& manifest, const BatchJob& job);

// Bytes of one row of `spec` in `variant` (the product of the non-batch dimensions times
// the element size), or of the whole tensor when it has no batch axis.
int64_t RowBytes(const Manifest& manifest, const TensorSpec& spec, const ShapeVariant& variant,
                 bool is_input);
// Bytes of `spec` in `variant` for one request of `rows` rows (RowBytes x rows along the batch
// axis, the whole tensor without one); -1 on overflow.
int64_t RequestBytes(const Manifest& manifest, const TensorSpec& spec, const ShapeVariant& variant,
                     bool is_input, int64_t rows);

}  // namespace ferry
