// Coalescing: which requests of a model's queue one dispatch takes, and at which compiled
// batch size.
//
// Rules (the scheduler specification, point by point):
// - Only a coalescable model (every input and output has a batch axis, batched module)
//   merges requests; otherwise each request dispatches alone. Unbatched modules (size 0)
//   never coalesce.
// - Requests of the front request's shape variant are taken in FIFO order; requests of other
//   variants between them stay queued in place. A request whose shape has no compiled program
//   dispatches alone.
// - Requests are indivisible. The front request is always taken (forward progress); one that
//   exceeds max_batch_size or the largest size dispatches alone at the smallest compiled size
//   that fits it.
// - kLargest (default): whole requests up to the cap (stopping at the first that would pass
//   it), run at the smallest compiled size that holds their rows (padded). kCost: among
//   compiled sizes, the one that serves the most real rows per learned second (on the
//   contiguous same-variant prefix).
// - max_batch_size caps the rows taken, never the compiled shapes.
// - Only requests of the tenants allowed join the front (the scheduler's fair share between
//   tenants); kCost's contiguous prefix stops at the first other one.
//
// Thread safety: pure function; safe for concurrent use.
#pragma once

#include <optional>
#include <string>

#include "common/result.h"
#include "config/scheduler_config.h"
#include "worker/scheduler/cost_model.h"
#include "worker/scheduler/model_queue.h"

namespace ferry {

struct BatchPlan {
  size_t count = 0;  // Requests taken (picks.size()).
  // Their positions in the queue, ascending; picks[0] == 0 (the front is always taken).
  // Requests of the front's variant only; others between them stay queued.
  std::vector<size_t> picks;
  int64_t rows = 0;    // Their rows.
  int size_index = 0;  // Index into ModelSpec::batch_sizes.
  int64_t batch_size = 0;
  std::optional<Error> failure;  // The front request cannot run (count == 1).
};

// `tenants`: bit t set when tenant t's requests may join the front's (fair's fillers,
// scheduler.h); the others stay queued in place, as requests of another variant do.
// REQUIRES: !queue.empty().
BatchPlan PlanBatch(const ModelQueue& queue, const ModelSpec& spec, const CostModel& cost,
                    BatchSizing sizing, bool coalesce, uint64_t tenants = ~uint64_t{0});

// The rows cap for one dispatch: min(max_batch_size, largest compiled size); 0 if unbatched.
int64_t EffectiveMaxBatch(const ModelSpec& spec);

// Index of the smallest compiled size >= rows; nullopt when rows exceed the largest.
std::optional<int> SmallestFitting(const std::vector<int64_t>& sizes, int64_t rows);

}  // namespace ferry
