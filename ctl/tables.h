// ferryctl's human output: fixed-width tables of ferryd's control replies (the --json output
// is the reply itself).
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace ferry::ctl {

std::string FormatStatus(const nlohmann::json& status);
std::string FormatMetrics(const nlohmann::json& metrics);
std::string FormatControlStatus(const nlohmann::json& control);
// `ferryctl tenants`: per tenant, weight, answers served and refused by reason, execution
// time and its share of the node's.
std::string FormatTenants(const nlohmann::json& tenants);
// `ferryctl top`: per-model rates between two scheduler_metrics replies `seconds` apart:
// requests/s, rows/s, mean batch size, queue depth and share of the workers' compute time.
std::string FormatTop(const nlohmann::json& before, const nlohmann::json& after, double seconds);

}  // namespace ferry::ctl
