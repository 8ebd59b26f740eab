// Plain data the scheduler exchanges with its caller (the worker's dispatch loop, tests, and
// ferry-sim): requests as the scheduler sees them, models as registered, and the Dispatch it
// decides. The scheduler never touches tensors: a request carries an opaque `payload` the
// caller uses to find its tensors.
//
// Thread safety: plain data; requires external synchronization.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "common/priority.h"
#include "common/result.h"
#include "config/scheduler_config.h"

namespace ferry {

// Monotonic time in nanoseconds. The scheduler never reads a clock: every call takes `now`.
using Nanos = int64_t;
inline constexpr Nanos kNanosPerSecond = 1'000'000'000;

// A request's variant when its input shape matches no compiled program: it dispatches alone
// and fails with "no compiled program for input shape" (the caller, which holds the tensors,
// appends the shape).
inline constexpr int kNoCompiledProgram = -1;

// Trivially copyable, so queues move requests with plain copies.
struct QueuedRequest {
  uint64_t payload = 0;  // Opaque to the scheduler: the caller's handle on the tensors.
  int variant = 0;       // Shape variant index, or kNoCompiledProgram.
  int64_t rows = 1;      // Rows along the batch axis (1 for tensors without one).
  Nanos arrival = 0;
  std::optional<Nanos> deadline;         // Absolute; nullopt = none (least urgent under edf).
  uint64_t meta_id = 0;                  // Non-zero for a committed meta sub-call.
  Priority priority = kDefaultPriority;  // kHighestPriority..kLowestPriority.
  uint32_t tenant = 0;                   // The node's tenant number (1-based), 0 = none.
};

// A model as the scheduler knows it: the manifest's batching facts plus its settings.
struct ModelSpec {
  std::string name;
  // Ascending compiled batch sizes; {0} for an unbatched module. Shared by all variants.
  std::vector<int64_t> batch_sizes;
  int num_variants = 1;
  // Every input and output has a batch axis and the module is batched: requests coalesce.
  bool coalescable = true;
  // The input a gateway counts items on, and its 1-based batch axis (0 = none).
  std::string wire_batch_input;
  int wire_batch_axis = 0;
  ModelSchedulingConfig config;
};

static_assert(std::is_trivially_copyable_v<QueuedRequest>);

// One decision of the scheduler: what to run now, and what to fail.
struct Dispatch {
  int model = -1;  // The model decided on; -1 when no model had work.
  int variant = 0;
  int64_t batch_size = 0;  // The compiled size to execute (0: unbatched module).
  int64_t rows = 0;        // Real rows; batch_size - rows are zero padding.
  // Exactly one request that fills the compiled size: its inputs are used as they are, with
  // no concatenation and no padding.
  bool pass_through = false;
  bool committed_meta = false;  // A committed meta sub-call, dispatched ahead of the scan.
  // fair: the GPU seconds charged to the model's virtual clock when it was dispatched (its
  // learned cost); Complete() corrects the charge to the measured time.
  double charged_seconds = 0;
  // The slowest of the last CostModel::kWindow runs at this (variant, compiled size), warm-up
  // included; -1 before any.
  double worst_recent_seconds = -1;
  // fair: the charge split over the tenants whose requests ran, by rows (tenant, share of the
  // rows, seconds charged, and the tenant and model weights it was divided by).
  struct ShareCharge {
    uint32_t tenant = 0;
    double fraction = 1;
    double seconds = 0;
    double tenant_weight = 1;
    double model_weight = 1;
  };
  std::vector<ShareCharge> charges;
  std::vector<QueuedRequest> requests;  // In queue order; run together.

  // Requests dropped before GPU work because they cannot meet their deadline
  // (DEADLINE_EXCEEDED).
  std::vector<QueuedRequest> shed;
  // Requests that cannot run at all, with why (e.g. no compiled program for their shape).
  std::vector<QueuedRequest> failed;
  std::optional<Error> failure;

  bool runs() const { return model >= 0 && !requests.empty(); }
};

}  // namespace ferry
