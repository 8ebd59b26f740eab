// The scheduler's view of the repository's models (model/repository.h lists and loads them).
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include "model/repository.h"
#include "worker/scheduler/scheduler_types.h"

namespace ferry {

// The scheduler's view of a model: its compiled sizes and variants, whether requests
// coalesce, and the input a gateway counts rows on. A failed model or a pipeline (run by the
// hook hosts) gets a placeholder spec (one size, one variant) so the numbering holds; nothing
// is ever queued for it.
ModelSpec SpecForModel(const RepositoryModel& model);
// The same for model `name` whose bundle is `bundle` (null: failed or unloaded).
ModelSpec SpecForBundle(const std::string& name, const Bundle* bundle);

}  // namespace ferry
