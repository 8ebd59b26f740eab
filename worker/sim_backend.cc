#include "worker/sim_backend.h"

#include <chrono>
#include <cstring>
#include <thread>

namespace ferry {

double SimCost::Seconds(int64_t batch_size) const {
  auto it = table.find(batch_size);
  return it != table.end() ? it->second
                           : fixed_seconds + per_row_seconds * static_cast<double>(batch_size);
}

SimBackend::SimBackend(std::map<std::string, SimCost> costs, SimCost fallback, Spend spend)
    : costs_(std::move(costs)), fallback_(std::move(fallback)), spend_(std::move(spend)) {
  if (!spend_) {
    spend_ = [](double seconds) {
      std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    };
  }
}

Result<ModelHandle> SimBackend::Load(const Bundle& bundle) {
  models_.push_back(&bundle);
  return static_cast<ModelHandle>(models_.size() - 1);
}

Status SimBackend::ModelStatus(ModelHandle model) const {
  if (model < 0 || static_cast<size_t>(model) >= models_.size()) {
    return NotFound("sim backend: no model " + std::to_string(model));
  }
  return OkStatus();
}

Result<ExecutionTiming> SimBackend::Execute(ModelHandle model, const BatchJob& job) {
  FERRY_RETURN_IF_ERROR(ModelStatus(model));
  const Manifest& manifest = models_[static_cast<size_t>(model)]->manifest;
  FERRY_RETURN_IF_ERROR(ValidateJob(manifest, job));
  auto it = costs_.find(manifest.name);
  const SimCost& cost = it != costs_.end() ? it->second : fallback_;
  auto start = std::chrono::steady_clock::now();
  spend_(cost.Seconds(job.batch_size));
  for (const RequestIo& io : job.requests) {
    for (const std::span<uint8_t>& out : io.outputs) {
      std::memset(out.data(), 0, out.size());
    }
  }
  return ExecutionTiming{
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(), 0.0};
}

}  // namespace ferry
