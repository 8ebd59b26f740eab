// ferryd's control protocol, version 1: JSON lines over a Unix stream socket.
//
// A request is one line (at most kMaxRequestBytes, '\n'-terminated) holding one object:
//   {"v": 1, "cmd": "status"}
//   {"v": 1, "cmd": "scheduler_metrics"}
//   {"v": 1, "cmd": "control_status"}
//   {"v": 1, "cmd": "set_policy", "model": "mlp", "weight": 2.0}
//   {"v": 1, "cmd": "set_tenant", "tenant": "acme", "weight": 2.0}
//   {"v": 1, "cmd": "set_residency", "model": "mlp", "level": "pinned|warm|on_demand"}
//   {"v": 1, "cmd": "set_discipline", "discipline": "fair|fifo|edf"}
//   {"v": 1, "cmd": "compact"}
//   {"v": 1, "cmd": "reload"}
//   {"v": 1, "cmd": "drain"}
//   {"v": 1, "cmd": "load", "model": "NAME"}      (a bundle of the repository)
//   {"v": 1, "cmd": "unload", "model": "NAME"}
// The reply is one line: {"v": 1, "ok": true, "result": {...}} or
// {"v": 1, "ok": false, "code": "INVALID_ARGUMENT", "error": "..."}. A connection may send
// several requests, each answered in order. Unknown keys are errors (a typo is never ignored).
// docs/supervisor.md documents each command's result.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/result.h"
#include "config/scheduler_config.h"

namespace ferry::control {

inline constexpr int kControlProtocolVersion = 1;
inline constexpr size_t kMaxRequestBytes = 64 << 10;

enum class Command {
  kStatus,
  kSchedulerMetrics,
  kControlStatus,
  kSetPolicy,
  kSetResidency,
  kSetDiscipline,
  kCompact,
  kReload,
  kDrain,
  kLoad,       // model: a bundle of the repository, added at the next index.
  kUnload,     // model: a loaded model; its index stays taken.
  kSetTenant,  // tenant, weight: a tenant's fair-share weight, live.
  kTenants,    // Per tenant: weight, models, answers by outcome, execution time and share.
};

struct ControlRequest {
  Command command = Command::kStatus;
  std::string model;                          // set_policy, set_residency, load, unload.
  std::string tenant;                         // set_tenant.
  double weight = 0;                          // set_policy, set_tenant: finite, > 0.
  Residency residency = Residency::kWarm;     // set_residency.
  Discipline discipline = Discipline::kFair;  // set_discipline.
};

// INVALID_ARGUMENT saying what is wrong: not JSON, not an object, another version, an unknown
// command or key, a missing or mistyped argument, a bad model name, a weight not > 0.
// `line` excludes the '\n'; longer than kMaxRequestBytes is refused.
Result<ControlRequest> ParseControlRequest(std::string_view line);

// Encodes a request (ferryctl's side); always a single line.
std::string EncodeControlRequest(const ControlRequest& request);

// One reply line, '\n'-terminated.
std::string EncodeReply(const Result<nlohmann::json>& reply);

// The result of a reply line: its "result", or its error (code and message) as ferryd sent
// it; INTERNAL for a line that is not a version-1 reply.
Result<nlohmann::json> DecodeReply(std::string_view line);

std::string_view CommandName(Command command);

}  // namespace ferry::control
