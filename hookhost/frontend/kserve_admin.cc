// The service's administrative endpoints: the logging extension and the repository
// extension (index, load and unload; docs/frontend.md, "Repository").
#include <algorithm>

#include "config/scheduler_config.h"
#include "hookhost/frontend/kserve_codec.h"
#include "hookhost/frontend/kserve_service.h"

namespace ferry::frontend {

using nlohmann::json;

namespace {

// A load's body or config override: small and shallow, or it is not one (and no recursive
// parser sees it).
constexpr size_t kMaxLoadBodyBytes = 64 << 10;
constexpr int kMaxLoadDepth = 8;

json ParseSmall(std::string_view text, bool* ok) {
  *ok = text.size() <= kMaxLoadBodyBytes && JsonDepthWithin(text, kMaxLoadDepth);
  json parsed = *ok ? json::parse(text, nullptr, false) : json();
  *ok = *ok && !parsed.is_discarded();
  return parsed;
}

}  // namespace

net::HttpResponse KServeService::Logging(const net::HttpRequest& request) {
  if (request.method != "GET" && request.method != "POST") {
    return MethodNotAllowed(request);
  }
  if (request.method == "GET") {
    Result<json> current = LogSettingsCall(json::object());
    return current.ok() ? JsonAnswer(200, *current) : ErrorResponse(current.error());
  }
  // A handful of keys: a larger body is not settings (and bounds the parser's nesting).
  if (request.body.size() > kMaxLogSettingsBytes) {
    return ErrorResponse(InvalidArgument("log settings: a body of at most " +
                                         std::to_string(kMaxLogSettingsBytes) + " bytes"));
  }
  json changes = json::parse(request.body, nullptr, false);
  if (changes.is_discarded()) {
    return ErrorResponse(InvalidArgument("log settings: the body is not JSON"));
  }
  if (!changes.is_object() || changes.empty()) {
    return ErrorResponse(InvalidArgument("log settings: expected a JSON object of settings"));
  }
  Result<json> updated = LogSettingsCall(changes);
  return updated.ok() ? JsonAnswer(200, *updated) : ErrorResponse(updated.error());
}

Result<json> KServeService::LogSettingsCall(const json& changes) {
  if (!log_) {
    return Unavailable("this front end has no hook host slot to log from");
  }
  if (changes.empty()) {
    return LogSettingsJson(log_->Current());
  }
  FERRY_ASSIGN_OR_RETURN(LogSettings updated, log_->Update(changes));
  return LogSettingsJson(updated);
}

net::HttpResponse KServeService::Repository(const std::vector<std::string_view>& parts,
                                            const net::HttpRequest& request,
                                            uint32_t tenant) const {
  if (request.method != "POST") {
    return MethodNotAllowed(request);
  }
  if (parts.size() == 3 && parts[2] == "index") {
    // The body is a flat object ({"ready": true}): anything deeper is not one (and is not
    // handed to a recursive parser).
    json body =
        JsonDepthWithin(request.body, 4) ? json::parse(request.body, nullptr, false) : json();
    bool ready_only = body.is_object() && body.value("ready", false);
    return JsonAnswer(200, RepositoryIndex(ready_only, tenant));
  }
  return NoSuchEndpoint(request);
}

bool IsTraceSetting(const std::vector<std::string_view>& parts) {
  return (parts.size() == 3 && parts[1] == "trace" && parts[2] == "setting") ||
         (parts.size() == 5 && parts[1] == "models" && parts[3] == "trace" &&
          parts[4] == "setting");
}

net::HttpResponse KServeService::TraceSetting(const std::vector<std::string_view>& parts,
                                              const net::HttpRequest& request) {
  if (request.method != "GET" && request.method != "POST") {
    return MethodNotAllowed(request);
  }
  if (parts.size() == 5 && Find(parts[2]) == nullptr) {
    return ErrorResponse(NotFound("unknown model '" + std::string(parts[2].substr(0, 128)) + "'"));
  }
  if (request.method == "GET") {
    Result<json> current = TraceSettingsCall(json::object());
    return current.ok() ? JsonAnswer(200, *current) : ErrorResponse(current.error());
  }
  if (parts.size() == 5) {
    return ErrorResponse(InvalidArgument(
        "trace settings are the node's, for every model: POST them to /v2/trace/setting"));
  }
  bool ok = false;
  json changes = ParseSmall(request.body, &ok);
  if (!ok || !changes.is_object() || changes.empty() || request.body.size() > 4096) {
    return ErrorResponse(
        InvalidArgument("trace settings: expected a JSON object of settings (at most 4 KiB)"));
  }
  Result<json> updated = TraceSettingsCall(changes);
  return updated.ok() ? JsonAnswer(200, *updated) : ErrorResponse(updated.error());
}

Result<json> KServeService::TraceSettingsCall(const json& changes) {
  if (!trace_) {
    return Unavailable("this front end has no hook host slot to trace from");
  }
  if (changes.empty()) {
    return TraceSettingsJson(trace_->Current());
  }
  FERRY_ASSIGN_OR_RETURN(TraceSettings updated, trace_->Update(changes));
  return TraceSettingsJson(updated);
}

bool IsRepositoryChange(const std::vector<std::string_view>& parts) {
  return parts.size() == 5 && parts[1] == "repository" && parts[2] == "models" &&
         (parts[4] == "load" || parts[4] == "unload");
}

void KServeService::RepositoryHttp(const std::vector<std::string_view>& parts,
                                   const net::HttpRequest& request, net::Responder respond) {
  if (request.method != "POST") {
    respond(MethodNotAllowed(request));
    return;
  }
  auto op = parts[4] == "load" ? shm::RepositoryOp::kLoad : shm::RepositoryOp::kUnload;
  std::string model(parts[3]);
  int64_t cap = 0;
  if (!request.body.empty()) {
    bool ok = false;
    json body = ParseSmall(request.body, &ok);
    if (!ok || !body.is_object()) {
      respond(
          ErrorResponse(InvalidArgument("a repository request's body is a JSON object of at "
                                        "most 64 KiB (nested at most 8 deep)")));
      return;
    }
    Result<int64_t> read = LoadParameters(op, model, body.value("parameters", json::object()));
    if (!read.ok()) {
      respond(ErrorResponse(read.error()));
      return;
    }
    cap = *read;
  }
  RepositoryChange(op, model, cap, [respond = std::move(respond)](const Status& status) {
    respond(status.ok() ? JsonAnswer(200, json::object()) : ErrorResponse(status.error()));
  });
}

Result<int64_t> KServeService::LoadParameters(shm::RepositoryOp op, const std::string& model,
                                              const json& parameters) {
  if (!parameters.is_object()) {
    return InvalidArgument("'parameters' must be an object");
  }
  int64_t cap = 0;
  for (const auto& [key, value] : parameters.items()) {
    if (key == "unload_dependents" && op == shm::RepositoryOp::kUnload && value.is_boolean()) {
      continue;  // Nothing depends on a ferry model but pipelines, which are models too.
    }
    if (key == "config" && op == shm::RepositoryOp::kLoad && value.is_string()) {
      FERRY_ASSIGN_OR_RETURN(cap, ConfigOverrideCap(model, value.get<std::string>()));
      continue;
    }
    if (key.rfind("file:", 0) == 0) {
      return InvalidArgument(
          "files in a load request are not taken: a model comes from a "
          "bundle in the node's model repository");
    }
    return InvalidArgument("parameter '" + key.substr(0, 64) + "' is not one a " +
                           (op == shm::RepositoryOp::kLoad ? "load" : "unload") +
                           " takes here (load: config; unload: unload_dependents)");
  }
  return cap;
}

Result<int64_t> KServeService::ConfigOverrideCap(const std::string& model,
                                                 std::string_view config) {
  bool ok = false;
  json parsed = ParseSmall(config, &ok);
  if (!ok || !parsed.is_object()) {
    return InvalidArgument("the config override is a JSON object of at most 64 KiB");
  }
  int64_t cap = 0;
  for (const auto& [key, value] : parsed.items()) {
    if (key == "name" && value.is_string() && value.get<std::string>() == model) {
      continue;
    }
    if (key == "max_batch_size" && value.is_number_integer() && value.get<int64_t>() >= 1 &&
        value.get<int64_t>() <= shm::kMaxLoadBatchCap) {
      cap = value.get<int64_t>();
      continue;
    }
    return InvalidArgument("config override '" + key.substr(0, 64) +
                           "': only name (the model's) and max_batch_size (1.." +
                           std::to_string(shm::kMaxLoadBatchCap) +
                           ", the scheduler's cap on batch rows) map onto a ferry bundle");
  }
  return cap;
}

void KServeService::RepositoryChange(shm::RepositoryOp op, const std::string& model,
                                     int64_t max_batch_size, RepositoryControl::Done done) {
  if (repository_ == nullptr) {
    done(PermissionDenied(kModelControlRefusal));
    return;
  }
  if (!IsValidModelName(model)) {
    done(
        InvalidArgument("not a model name (letters, digits, '_', '-', '.'; at most 128 "
                        "bytes)"));
    return;
  }
  repository_->Submit(op, model, max_batch_size, std::move(done));
}

}  // namespace ferry::frontend
