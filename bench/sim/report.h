// ferry-sim's output: a table for a person, one JSON object for a script.
//
// Thread safety: pure functions; safe for concurrent use.
#pragma once

#include <nlohmann/json.hpp>
#include <ostream>

#include "bench/sim/simulator.h"

namespace ferry::sim {

nlohmann::json RunToJson(const RunReport& run);
// {"scenario", "label", "models", "jain", ..., "alternatives": [...], "baselines": [...]}
nlohmann::json ReportToJson(const ScenarioReport& report);
void PrintTable(const ScenarioReport& report, std::ostream& out);

}  // namespace ferry::sim
