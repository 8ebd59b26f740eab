#include "control/control_protocol.h"

#include <cmath>
#include <set>
#include <utility>
#include <vector>

namespace ferry::control {
namespace {

using nlohmann::json;

const std::vector<std::pair<std::string_view, Command>>& Commands() {
  static const std::vector<std::pair<std::string_view, Command>> commands = {
      {"status", Command::kStatus},
      {"scheduler_metrics", Command::kSchedulerMetrics},
      {"control_status", Command::kControlStatus},
      {"set_policy", Command::kSetPolicy},
      {"set_residency", Command::kSetResidency},
      {"set_discipline", Command::kSetDiscipline},
      {"compact", Command::kCompact},
      {"reload", Command::kReload},
      {"drain", Command::kDrain},
      {"load", Command::kLoad},
      {"unload", Command::kUnload},
      {"set_tenant", Command::kSetTenant},
      {"tenants", Command::kTenants},
  };
  return commands;
}

// The arguments each command takes, besides "v" and "cmd".
std::set<std::string> ArgumentsOf(Command c) {
  switch (c) {
    case Command::kSetPolicy:
      return {"model", "weight"};
    case Command::kSetTenant:
      return {"tenant", "weight"};
    case Command::kSetResidency:
      return {"model", "level"};
    case Command::kSetDiscipline:
      return {"discipline"};
    case Command::kLoad:
    case Command::kUnload:
      return {"model"};
    default:
      return {};
  }
}

Result<std::string> StringArg(const json& object, const char* key) {
  auto it = object.find(key);
  if (it == object.end() || !it->is_string()) {
    return InvalidArgument(std::string("\"") + key + "\" must be a string");
  }
  return it->get<std::string>();
}

}  // namespace

std::string_view CommandName(Command command) {
  for (const auto& [name, c] : Commands()) {
    if (c == command) {
      return name;
    }
  }
  return "?";
}

Result<ControlRequest> ParseControlRequest(std::string_view line) {
  if (line.size() > kMaxRequestBytes) {
    return InvalidArgument("request longer than " + std::to_string(kMaxRequestBytes) + " bytes");
  }
  // nlohmann's parser recurses per nesting level; a request is flat, so deep input is refused
  // before it is parsed (a million '[' would otherwise exhaust the stack).
  int depth = 0;
  for (char ch : line) {
    depth += (ch == '[' || ch == '{') ? 1 : 0;
    if (depth > 8) {
      return InvalidArgument("request nested too deeply");
    }
  }
  json object = json::parse(line.begin(), line.end(), nullptr, false);
  if (object.is_discarded()) {
    return InvalidArgument("request is not JSON");
  }
  if (!object.is_object()) {
    return InvalidArgument("request is not a JSON object");
  }
  auto version = object.find("v");
  if (version == object.end() || !version->is_number_integer() ||
      version->get<int64_t>() != kControlProtocolVersion) {
    return InvalidArgument("\"v\" must be " + std::to_string(kControlProtocolVersion) +
                           " (this ferryd speaks control protocol version " +
                           std::to_string(kControlProtocolVersion) + ")");
  }
  FERRY_ASSIGN_OR_RETURN(std::string name, StringArg(object, "cmd"));
  ControlRequest request;
  bool known = false;
  std::string names;
  for (const auto& [n, c] : Commands()) {
    names += (names.empty() ? "" : ", ") + std::string(n);
    if (n == name) {
      request.command = c;
      known = true;
    }
  }
  if (!known) {
    return InvalidArgument("unknown command '" + name.substr(0, 64) + "' (commands: " + names +
                           ")");
  }
  std::set<std::string> allowed = ArgumentsOf(request.command);
  for (const auto& [key, value] : object.items()) {
    if (key != "v" && key != "cmd" && allowed.count(key) == 0) {
      return InvalidArgument("'" + name + "' takes no argument '" + key.substr(0, 64) + "'");
    }
  }
  if (allowed.count("model") != 0) {
    FERRY_ASSIGN_OR_RETURN(request.model, StringArg(object, "model"));
    if (!IsValidModelKey(request.model)) {
      return InvalidArgument("\"model\" is not a model name");
    }
  }
  if (request.command == Command::kSetTenant) {
    FERRY_ASSIGN_OR_RETURN(request.tenant, StringArg(object, "tenant"));
    if (!IsValidModelName(request.tenant)) {
      return InvalidArgument("\"tenant\" is not a tenant name");
    }
  }
  if (request.command == Command::kSetPolicy || request.command == Command::kSetTenant) {
    auto weight = object.find("weight");
    if (weight == object.end() || !weight->is_number()) {
      return InvalidArgument("\"weight\" must be a number");
    }
    request.weight = weight->get<double>();
    if (!std::isfinite(request.weight) || request.weight <= 0) {
      return InvalidArgument("\"weight\" must be finite and > 0");
    }
  }
  if (request.command == Command::kSetResidency) {
    FERRY_ASSIGN_OR_RETURN(std::string level, StringArg(object, "level"));
    bool found = false;
    for (Residency r : {Residency::kPinned, Residency::kWarm, Residency::kOnDemand}) {
      if (ResidencyName(r) == level) {
        request.residency = r;
        found = true;
      }
    }
    if (!found) {
      return InvalidArgument("\"level\" must be pinned, warm or on_demand");
    }
  }
  if (request.command == Command::kSetDiscipline) {
    FERRY_ASSIGN_OR_RETURN(std::string discipline, StringArg(object, "discipline"));
    bool found = false;
    for (Discipline d : {Discipline::kFair, Discipline::kFifo, Discipline::kEdf}) {
      if (DisciplineName(d) == discipline) {
        request.discipline = d;
        found = true;
      }
    }
    if (!found) {
      return InvalidArgument("\"discipline\" must be fair, fifo or edf");
    }
  }
  return request;
}

std::string EncodeControlRequest(const ControlRequest& request) {
  json object = {{"v", kControlProtocolVersion}, {"cmd", CommandName(request.command)}};
  switch (request.command) {
    case Command::kSetPolicy:
      object["model"] = request.model;
      object["weight"] = request.weight;
      break;
    case Command::kSetTenant:
      object["tenant"] = request.tenant;
      object["weight"] = request.weight;
      break;
    case Command::kSetResidency:
      object["model"] = request.model;
      object["level"] = ResidencyName(request.residency);
      break;
    case Command::kSetDiscipline:
      object["discipline"] = DisciplineName(request.discipline);
      break;
    case Command::kLoad:
    case Command::kUnload:
      object["model"] = request.model;
      break;
    default:
      break;
  }
  return object.dump() + "\n";
}

std::string EncodeReply(const Result<nlohmann::json>& reply) {
  json object = {{"v", kControlProtocolVersion}, {"ok", reply.ok()}};
  if (reply.ok()) {
    object["result"] = *reply;
  } else {
    object["code"] = ErrorCodeName(reply.error().code);
    object["error"] = reply.error().message;
  }
  // Invalid UTF-8 (a model's error text) is replaced, never a throw.
  return object.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<nlohmann::json> DecodeReply(std::string_view line) {
  json object = json::parse(line.begin(), line.end(), nullptr, false);
  if (object.is_discarded() || !object.is_object() || !object.contains("ok") ||
      !object["ok"].is_boolean()) {
    return Internal("ferryd sent a reply that is not control protocol version " +
                    std::to_string(kControlProtocolVersion));
  }
  if (object["ok"].get<bool>()) {
    return object.contains("result") ? object["result"] : json::object();
  }
  // value() throws on a mistyped member; these are checked first.
  std::string code = object.contains("code") && object["code"].is_string()
                         ? object["code"].get<std::string>()
                         : "INTERNAL";
  std::string message = object.contains("error") && object["error"].is_string()
                            ? object["error"].get<std::string>()
                            : "(no message)";
  for (ErrorCode c : {ErrorCode::kInvalidArgument, ErrorCode::kNotFound,
                      ErrorCode::kResourceExhausted, ErrorCode::kDeadlineExceeded,
                      ErrorCode::kUnavailable, ErrorCode::kInternal, ErrorCode::kCancelled}) {
    if (ErrorCodeName(c) == code) {
      return Error{c, message};
    }
  }
  return Internal(message);
}

}  // namespace ferry::control
