#include "supervisor/node_report.h"

#include <string>

#include "common/clock.h"
#include "config/scheduler_config.h"

namespace ferry::supervisor {
namespace {

std::string Field(const char* text, size_t size) {
  size_t n = 0;
  while (n < size && text[n] != '\0') {
    ++n;
  }
  return std::string(text, n);
}

template <size_t N>
std::string Field(const char (&text)[N]) {
  return Field(text, N);
}

std::string ResidencyText(uint32_t value) {
  return value <= static_cast<uint32_t>(Residency::kOnDemand)
             ? std::string(ResidencyName(static_cast<Residency>(value)))
             : "unknown";
}

std::string ModelStateText(uint32_t value) {
  switch (static_cast<shm::ModelLoadState>(value)) {
    case shm::ModelLoadState::kReady:
      return "ready";
    case shm::ModelLoadState::kPipeline:
      return "pipeline";
    case shm::ModelLoadState::kUnloaded:
      return "unloaded";
    default:
      return "failed";
  }
}

}  // namespace

nlohmann::json ModelMetricsJson(const shm::ModelStatusData& m) {
  return {{"model", Field(m.name)},
          {"queue_depth", m.queue_depth},
          {"outstanding", m.outstanding},
          {"dispatches", m.dispatch_count},
          {"requests_served", m.requests_served},
          {"rows_served", m.rows_served},
          {"padding_rows", m.padding_rows},
          {"rejected", m.rejected},
          {"shed", m.shed},
          {"failed", m.failed},
          {"cancelled", m.cancelled},
          {"errors", m.errors},
          {"live_sequences", m.live_sequences},
          {"max_sequences", m.max_sequences},
          {"compute_seconds", m.total_compute_seconds},
          {"recent_compute_share", m.recent_compute},
          {"queue_wait_p50_us", m.queue_wait_p50_ns / 1000},
          {"queue_wait_p99_us", m.queue_wait_p99_ns / 1000},
          {"weight_loads", m.weight_loads},
          {"weight_evictions", m.weight_evictions}};
}

nlohmann::json ModelControlJson(const shm::ModelStatusData& m) {
  nlohmann::json out = {{"model", Field(m.name)},  {"state", ModelStateText(m.state)},
                        {"weight", m.weight},      {"residency", ResidencyText(m.residency)},
                        {"loaded", m.loaded != 0}, {"effective_max_batch", m.effective_max_batch}};
  if (m.state == static_cast<uint32_t>(shm::ModelLoadState::kFailed)) {
    out["error"] = Field(m.error);
  }
  if (m.weight_bytes > 0) {  // Under a weight budget.
    out["weight_bytes"] = m.weight_bytes;
    out["weight_loads"] = m.weight_loads;
    out["weight_evictions"] = m.weight_evictions;
    out["weight_load_seconds"] = m.weight_load_seconds;
    if (m.last_weight_load_ns > 0) {
      out["last_weight_load_seconds_ago"] =
          static_cast<double>(std::max<int64_t>(0, MonotonicNs() - m.last_weight_load_ns)) * 1e-9;
    }
  }
  return out;
}

nlohmann::json WorkerSummaryJson(const shm::StatusSnapshotData& s) {
  std::string discipline = s.discipline <= static_cast<uint32_t>(Discipline::kEdf)
                               ? std::string(DisciplineName(static_cast<Discipline>(s.discipline)))
                               : "unknown";
  std::string mode =
      s.residency_mode <= static_cast<uint32_t>(ResidencyMode::kExternal)
          ? std::string(ResidencyModeName(static_cast<ResidencyMode>(s.residency_mode)))
          : "unknown";
  return {
      {"state", s.state <= static_cast<uint32_t>(shm::ProcessState::kUnhealthy)
                    ? std::string(shm::ProcessStateName(static_cast<shm::ProcessState>(s.state)))
                    : "unknown"},
      {"generation", s.generation},
      {"discipline", discipline},
      {"residency_mode", mode},
      {"dispatches", s.dispatches},
      {"invalid_descriptors", s.invalid_descriptors},
      {"device_memory_in_use", s.device_memory_in_use},
      {"weight_budget_bytes", s.weight_budget_bytes},
      {"weight_resident_bytes", s.weight_resident_bytes},
      {"host_gap_p50_us", s.host_gap_p50_ns / 1000},
      {"host_gap_p99_us", s.host_gap_p99_ns / 1000}};
}

}  // namespace ferry::supervisor
