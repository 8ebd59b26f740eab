#include "worker/warm_up.h"

#include <spdlog/spdlog.h>

namespace ferry::worker {

void WarmUp(Backend& backend, Scheduler& scheduler, const std::vector<LoopModel>& models,
            std::optional<int> only) {
  for (const WarmupRun& run : scheduler.WarmupPlan()) {
    // At start `models` grows one model at a time: later ones are not in it yet.
    if ((only && run.model != *only) || static_cast<size_t>(run.model) >= models.size()) {
      continue;
    }
    const LoopModel& model = models[static_cast<size_t>(run.model)];
    if (model.failure || model.pipeline || model.unloaded) {
      continue;
    }
    const Manifest& manifest = model.bundle->manifest;
    const ShapeVariant& variant = manifest.variants[static_cast<size_t>(run.variant)];
    int64_t rows = manifest.unbatched() ? 1 : run.batch_size;
    std::vector<std::vector<uint8_t>> buffers;
    RequestIo io;
    io.rows = rows;
    for (const TensorSpec& spec : manifest.inputs) {
      int64_t bytes = RequestBytes(manifest, spec, variant, true, rows);
      buffers.emplace_back(static_cast<size_t>(bytes), 0);
      io.inputs.emplace_back(buffers.back());
    }
    for (const TensorSpec& spec : manifest.outputs) {
      int64_t bytes = RequestBytes(manifest, spec, variant, false, rows);
      buffers.emplace_back(static_cast<size_t>(bytes), 0);
      io.outputs.emplace_back(buffers.back());
    }
    BatchJob job{run.variant, run.batch_size, {io}};
    Result<ExecutionTiming> timing = backend.Execute(model.handle, job);
    if (timing.ok()) {
      timing = backend.Execute(model.handle, job);
    }
    if (!timing.ok()) {
      spdlog::warn("warm-up of '{}' at size {}: {}", model.name, run.batch_size,
                   timing.error().ToString());
      continue;
    }
    scheduler.SeedCost(run.model, run.variant, run.batch_size, timing->compute_seconds);
  }
}

}  // namespace ferry::worker
