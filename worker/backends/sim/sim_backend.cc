#include "worker/backends/sim/sim_backend.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <thread>

#include "common/clock.h"

namespace ferry {

double SimCost::Seconds(int64_t batch_size) const {
  auto it = table.find(batch_size);
  return it != table.end() ? it->second
                           : fixed_seconds + per_row_seconds * static_cast<double>(batch_size);
}

SimBackend::SimBackend(std::map<std::string, SimCost> costs, SimCost fallback, Spend spend)
    : costs_(std::move(costs)),
      fallback_(std::move(fallback)),
      spend_(std::move(spend)),
      custom_spend_(spend_ != nullptr) {
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

Status SimBackend::Begin(ModelHandle model, const BatchJob& job) {
  if (custom_spend_) {
    return Backend::Begin(model, job);
  }
  FERRY_RETURN_IF_ERROR(ModelStatus(model));
  const Manifest& manifest = models_[static_cast<size_t>(model)]->manifest;
  FERRY_RETURN_IF_ERROR(ValidateJob(manifest, job));
  auto it = costs_.find(manifest.name);
  const SimCost& cost = it != costs_.end() ? it->second : fallback_;
  job_ = &job;
  started_ns_ = MonotonicNs();
  ready_ns_ = started_ns_ + static_cast<int64_t>(cost.Seconds(job.batch_size) * 1e9);
  return OkStatus();
}

bool SimBackend::Ready() const { return custom_spend_ || MonotonicNs() >= ready_ns_; }

int64_t SimBackend::ExpectedRemainingNs() const {
  return custom_spend_ ? -1 : std::max<int64_t>(0, ready_ns_ - MonotonicNs());
}

Result<ExecutionTiming> SimBackend::Finish() {
  if (custom_spend_) {
    return Backend::Finish();
  }
  while (MonotonicNs() < ready_ns_) {
    if (ready_ns_ - MonotonicNs() > 200'000) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  for (const RequestIo& io : job_->requests) {
    for (const std::span<uint8_t>& out : io.outputs) {
      std::memset(out.data(), 0, out.size());
    }
  }
  job_ = nullptr;
  return ExecutionTiming{static_cast<double>(ready_ns_ - started_ns_) * 1e-9, 0.0, started_ns_,
                         ready_ns_};
}

}  // namespace ferry
