// A process's status in shared memory: a heartbeat counter and a snapshot (worker state, per
// model metrics and control status, outstanding requests, device memory) that any process
// reads without a lock. ferryd watches the heartbeat and serves /metrics from the snapshots;
// hook hosts read readiness, per-model outstanding counts and residency to pick a worker.
//
// Seqlock: the owner makes `sequence` odd, writes the snapshot, makes it even again; a reader
// copies the snapshot between two reads of `sequence` and keeps the copy only when both reads
// are equal and even. The fences are the ones a seqlock needs on weakly ordered CPUs
// (Boehm, "Can seqlocks get along with programming language memory models?", 2012):
//   writer: sequence := odd (relaxed); fence(release); write snapshot; sequence := even (release)
//   reader: s1 := sequence (acquire); copy snapshot; fence(acquire); s2 := sequence (relaxed)
// The release fence orders the odd store before the data stores, so a reader that sees any
// new data sees s2 odd or changed; the acquire fence orders the data loads before the s2 load.
// A writer that dies mid-write leaves `sequence` odd: readers then get UNAVAILABLE until
// ResetSlot (shm/recovery.h) clears the slot's status.
//
// Thread safety: one writer thread per slot (the owning process's loop); any number of
// readers in any process. Process safety: the slot's owner is the only writer.
#pragma once

#include <atomic>
#include <cstdint>
#include <iterator>
#include <optional>
#include <string>
#include <string_view>

#include "common/histogram_bounds.h"
#include "common/priority.h"
#include "common/result.h"
#include "shm/repository_mailbox.h"
#include "shm/segment.h"

namespace ferry::shm {

inline constexpr uint32_t kMaxStatusModels = 64;

enum class ProcessState : uint32_t {
  kStarting = 0,   // Loading models and warming up.
  kReady = 1,      // Serving.
  kDraining = 2,   // Finishing queued work; new submissions are refused (UNAVAILABLE).
  kStopped = 3,    // Exited cleanly.
  kUnhealthy = 4,  // A fault it cannot recover from (a lost CUDA context): restart it.
};
std::string_view ProcessStateName(ProcessState state);

// kPipeline: a pipeline bundle, run by the hook hosts (a worker never executes it).
// kUnloaded: an index whose model was unloaded (ferryctl unload); its name is a placeholder.
enum class ModelLoadState : uint32_t { kReady = 0, kFailed = 1, kPipeline = 2, kUnloaded = 3 };

// Histogram bounds: common/histogram_bounds.h (the scheduler counts with the same).
using ferry::kBatchSizeBounds;
using ferry::kBatchSizeBuckets;
using ferry::kQueueWaitBoundsNs;
using ferry::kQueueWaitBuckets;

// Fixed-size strings are NUL-terminated and truncated to fit.
// Executions at one compiled batch size (Triton's batch_stats): how many finished and their
// summed execution time.
inline constexpr size_t kMaxBatchStats = 16;
struct BatchStatsData {
  int64_t batch_size;  // 0: unused entry.
  uint64_t executions;
  uint64_t compute_ns;
};

// What a worker answered for one model, in the terms of Triton's statistics extension
// (docs/frontend.md). Times run from when the worker drained the request from its ring.
struct AnswerStatsData {
  uint64_t ok_requests;
  uint64_t ok_rows;     // Batch rows of the successful requests (Triton's inference_count).
  uint64_t ok_ns;       // Summed time from arrival to answer written.
  uint64_t compute_ns;  // Summed over successful requests: their batch's execution time.
  uint64_t failed_requests;
  uint64_t failed_ns;
  int64_t last_answer_unix_ms;  // CLOCK_REALTIME of the last successful answer (0: none).
  // Entry i: the i-th compiled size; sizes past the last entry share it.
  BatchStatsData batches[kMaxBatchStats];
};

struct ModelStatusData {
  char name[136];
  char wire_batch_input[64];
  char error[256];     // Why the model failed, when state == kFailed.
  uint32_t state;      // ModelLoadState.
  uint32_t residency;  // ferry::Residency.
  int32_t wire_batch_axis;
  uint32_t loaded;  // Weights resident on the device now.
  // Under a weight budget ([worker] weight_budget): what the weights take, cold loads and
  // evictions since the worker started, the loads' seconds and when the last one finished
  // (CLOCK_MONOTONIC; 0: never).
  uint64_t weight_bytes;
  uint64_t weight_loads;
  uint64_t weight_evictions;
  double weight_load_seconds;
  int64_t last_weight_load_ns;
  double weight;
  double load_seconds;  // How long the backend took to load it (weights up, executables built).
  double total_compute_seconds;
  double recent_compute;
  uint64_t queue_depth;
  uint64_t outstanding;  // Queued or executing: what a gateway balances on.
  uint64_t dispatch_count;
  uint64_t requests_served;
  uint64_t rows_served;
  uint64_t padding_rows;
  uint64_t rejected;
  uint64_t shed;
  uint64_t failed;
  uint64_t cancelled;  // Taken out of the queue because their client left.
  uint64_t errors;     // Requests failed by a backend error.
  // A stateful model's sequences live on this worker now, and its max_sequences (0: the
  // model keeps no state).
  uint64_t live_sequences;
  uint64_t max_sequences;
  int64_t queue_wait_p50_ns;
  int64_t queue_wait_p99_ns;
  int64_t effective_max_batch;
  // Cumulative since the worker started: requests dispatched with a queue wait <= each bound,
  // their count and summed wait; dispatches at a compiled size <= each bound, their count and
  // summed size.
  uint64_t queue_wait_le[kQueueWaitBuckets];
  uint64_t queue_wait_count;
  int64_t queue_wait_sum_ns;
  uint64_t batch_size_le[kBatchSizeBuckets];
  uint64_t batch_size_count;
  uint64_t batch_size_sum;
  AnswerStatsData answers;
};

// Queue waits, cumulative: requests with a wait <= each of kQueueWaitBoundsNs, their count and
// summed wait.
struct WaitHistogramData {
  uint64_t le[kQueueWaitBuckets];
  uint64_t count;
  int64_t sum_ns;
};

struct StatusSnapshotData {
  uint32_t state;       // ProcessState.
  uint32_t generation;  // The writer's slot generation.
  uint32_t discipline;  // ferry::Discipline.
  uint32_t residency_mode;
  uint32_t num_models;  // Used entries of `models`.
  // Hook hosts: 1 + the wire index of the model whose plugin call ran past its limit, written
  // before the host exits for a restart (0: none). Untrusted: ferryd checks the index.
  uint32_t fault_model;
  int64_t published_ns;  // CLOCK_MONOTONIC when written.
  uint64_t device_memory_in_use;
  uint64_t dispatches;
  uint64_t invalid_descriptors;
  // Weight load events since the worker started: models put on the device (at start and by
  // ferryctl load), loads that failed, models whose weights were freed (ferryctl unload), and
  // the time the loads took.
  uint64_t model_loads;
  uint64_t model_load_failures;
  uint64_t model_unloads;
  double model_load_seconds;
  // The weight budget (0: none) and the bytes of weights resident under it now.
  uint64_t weight_budget_bytes;
  uint64_t weight_resident_bytes;
  // Host time on the critical path: from the end of one execution to the start of the next,
  // counted only when work was already queued when the execution ended.
  int64_t host_gap_p50_ns;
  int64_t host_gap_p99_ns;
  uint64_t host_gap_samples;
  // Workers, per tenant (index: the node's tenant number, 0 = none): requests served and
  // their share of execution time (a batch's time split over its requests by rows).
  uint64_t tenant_requests[kMaxTenants + 1];
  double tenant_compute_seconds[kMaxTenants + 1];
  // The same by priority level (index 1..3; 0 unused).
  uint64_t priority_requests[kLowestPriority + 1];
  double priority_compute_seconds[kLowestPriority + 1];
  // Per tenant and per level: requests the worker holds now (queued or executing), and the
  // queue waits of those it executed (worker/flow_stats.h).
  uint64_t tenant_held[kMaxTenants + 1];
  WaitHistogramData tenant_waits[kMaxTenants + 1];
  uint64_t priority_held[kLowestPriority + 1];
  WaitHistogramData priority_waits[kLowestPriority + 1];
  // Why a worker that could not start gave up (its backend would not load), NUL-terminated;
  // written just before it exits with status 1. Untrusted text to its readers.
  char start_error[512];
  ModelStatusData models[kMaxStatusModels];
};

// What a hook host answered, per model (its wire index, below kMaxStatusModels) and tenant
// (0 = none): requests by outcome (index 0: success, else the ErrorCode + 1) and the time its
// plugins ran for them. In hook host objects only. Written by the hook host's threads (relaxed
// atomics), read by ferryd for /metrics as untrusted numbers. Cumulative across the hook
// host's restarts (ResetSlot leaves them), as Prometheus counters should be.
inline constexpr size_t kOutcomes = static_cast<size_t>(kLastErrorCode) + 2;
struct RequestCountsData {
  std::atomic<uint64_t> answered[kOutcomes];
  std::atomic<uint64_t> plugin_ns;
};
struct FrontEndCountersData {
  RequestCountsData models[kMaxStatusModels][kMaxTenants + 1];
  // Answered before a model was found (an unknown model; the hook host full or stopping).
  std::atomic<uint64_t> unrouted[kOutcomes];
  // Requests the gateway sent to a worker, by model and by whether the model's weights were
  // resident there as its status last said ([1]) or had to be loaded ([0]).
  std::atomic<uint64_t> placements[kMaxStatusModels][2];
  // Per tenant: requests admitted and not yet answered (zeroed when the hook host starts: a
  // dead host's requests are gone), and admitted in all (cumulative). ferryd copies both into
  // its object each tick (Segment::tenant_seen_*) for the other hook hosts' tenant limits.
  std::atomic<uint64_t> tenant_in_flight[kMaxTenants + 1];
  // Log settings a client asked this hook host for (logging extension): the sequence of the
  // request in the high 32 bits, LogSettings::Encode in the low; 0: none. ferryd reads it
  // each tick and applies a new one to the whole node (Segment::log_settings).
  std::atomic<uint64_t> log_request;
  // Client requests answered by the request's priority level (1..3; 0 unused) and outcome.
  std::atomic<uint64_t> priority_answered[kLowestPriority + 1][kOutcomes];
  std::atomic<uint64_t> tenant_admitted[kMaxTenants + 1];
  // Load and unload asked of this hook host (repository extension), answered by ferryd.
  RepositoryMailboxData repository;
};

struct StatusData {
  // Advanced by the owner every loop turn (and while an execution is in flight).
  alignas(64) std::atomic<uint64_t> heartbeat;
  alignas(64) std::atomic<uint64_t> sequence;  // Even: stable; odd: being written.
  StatusSnapshotData snapshot;
};

static_assert(std::is_trivially_copyable_v<StatusSnapshotData>);

// Copies `name` into a fixed field, truncated and NUL-terminated.
template <size_t N>
void CopyName(char (&field)[N], std::string_view name) {
  size_t n = name.size() < N - 1 ? name.size() : N - 1;
  name.copy(field, n);
  field[n] = '\0';
}

// The owner's side. REQUIRES: this process owns `slot`; one writer thread.
class StatusWriter {
 public:
  StatusWriter(const Segment& segment, uint32_t slot);
  void Beat() { data_->heartbeat.fetch_add(1, std::memory_order_relaxed); }
  void Publish(const StatusSnapshotData& snapshot);

 private:
  StatusData* data_;
  uint64_t sequence_;  // Private copy: the owner is its only writer.
};

// A consistent snapshot of `slot`'s status. UNAVAILABLE when none could be read in
// `attempts` tries (a writer that died mid-write); the heartbeat is read separately. Only the
// first num_models entries of `models` are read (and published): the rest are unspecified.
Result<StatusSnapshotData> ReadStatus(const Segment& segment, uint32_t slot, int attempts = 1000);
// ReadStatus retried for up to `patience_ns`, sleeping 200 us between tries: a writer
// preempted mid-publish on a busy host holds its status torn for a scheduling quantum or two,
// which quick attempts alone take for a status that cannot be read. UNAVAILABLE when still torn.
Result<StatusSnapshotData> ReadSettledStatus(const Segment& segment, uint32_t slot,
                                             int64_t patience_ns);
uint64_t ReadHeartbeat(const Segment& segment, uint32_t slot);
// The start error `slot`'s owner left before exiting (StatusSnapshotData::start_error), as
// printable ASCII (anything else becomes '?'); empty when there is none or no consistent
// snapshot. REQUIRES: read before ResetSlot clears the slot.
std::string ReadStartError(const Segment& segment, uint32_t slot);
// The model index a hook host named as the cause of its restart (fault_model), if any.
// REQUIRES: read before ResetSlot clears the slot.
std::optional<uint32_t> ReadFaultModel(const Segment& segment, uint32_t slot);

}  // namespace ferry::shm
