// Warm-up: every (model, variant, compiled size) of the scheduler's warm-up plan run twice on
// zero inputs, the second run's time seeding the scheduler's cost table (the first pays
// one-time costs: page faults, kernel selection, caches). At start for every model, and for
// a model loaded live before its first request, so the scheduler never meets a model it has
// no cost for.
//
// Thread safety: call where nothing else runs on `backend` (before the loop starts, or with
// no batch in flight).
#pragma once

#include <optional>
#include <vector>

#include "worker/backends/backend.h"
#include "worker/dispatch_loop.h"
#include "worker/scheduler/scheduler.h"

namespace ferry::worker {

// Warms every model of `models` (index = the scheduler's model number; the scheduler may know
// more models than `models` holds yet, which are skipped), or only model `only`.
// A run that fails is logged and skipped (its cost is then learned from traffic).
void WarmUp(Backend& backend, Scheduler& scheduler, const std::vector<LoopModel>& models,
            std::optional<int> only = std::nullopt);

}  // namespace ferry::worker
