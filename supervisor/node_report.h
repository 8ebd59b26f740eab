// What the control socket reports of a process's status snapshot (shm/status.h), as JSON:
// shared by ferryd's replies and, later, its /metrics.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>

#include "shm/status.h"

namespace ferry::supervisor {

// Every counter the scheduler keeps for one model (scheduler_metrics).
nlohmann::json ModelMetricsJson(const shm::ModelStatusData& model);
// A model's control status: load state and error, weight, residency, loaded, batch cap.
nlohmann::json ModelControlJson(const shm::ModelStatusData& model);
// A worker's scheduler-wide figures: state, discipline, dispatches, host gap.
nlohmann::json WorkerSummaryJson(const shm::StatusSnapshotData& snapshot);

}  // namespace ferry::supervisor
