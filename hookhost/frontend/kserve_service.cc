#include "hookhost/frontend/kserve_service.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <memory>
#include <thread>

#include "common/clock.h"
#include "hookhost/frontend/kserve_codec.h"
#include "net/compression.h"
#include "shm/node_load.h"
#include "shm/status.h"

namespace ferry::frontend {
namespace {

using nlohmann::json;

net::HttpResponse Json(int status, const json& body) {
  net::HttpResponse r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

// The path's parts between slashes ("/v2/models/m/infer" -> v2, models, m, infer); the
// query string is dropped.
std::vector<std::string_view> PathParts(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::vector<std::string_view> parts;
  while (!target.empty()) {
    size_t start = target.find_first_not_of('/');
    if (start == std::string_view::npos) {
      break;
    }
    target.remove_prefix(start);
    size_t end = target.find('/');
    parts.push_back(target.substr(0, end));
    target.remove_prefix(end == std::string_view::npos ? target.size() : end);
  }
  return parts;
}

std::string ModelState(const shm::ModelStatusData& m) {
  return std::string(m.name, strnlen(m.name, sizeof(m.name)));
}

}  // namespace

net::HttpResponse ErrorResponse(const Error& error) {
  int status = 500;
  switch (error.code) {
    case ErrorCode::kInvalidArgument:
      status = 400;
      break;
    case ErrorCode::kNotFound:
      status = 404;
      break;
    case ErrorCode::kResourceExhausted:
      status = 429;
      break;
    case ErrorCode::kDeadlineExceeded:
      status = 504;
      break;
    case ErrorCode::kUnavailable:
      status = 503;
      break;
    case ErrorCode::kInternal:
      status = 500;
      break;
    case ErrorCode::kCancelled:
      status = 499;  // nginx's "client closed request": the client left; nobody reads it.
      break;
  }
  net::HttpResponse r = Json(status, {{"error", error.message}});
  if (status == 429 || status == 503) {
    r.headers.emplace_back("Retry-After", "1");
  }
  return r;
}

KServeService::KServeService(const shm::Segment& segment,
                             const std::vector<hookhost::HookModel>& models,
                             hookhost::HookHost* host, const FrontendSettings& settings)
    : segment_(segment),
      models_(models),
      host_(host),
      max_request_bytes_(settings.max_request_bytes),
      max_inflate_ratio_(static_cast<uint64_t>(settings.max_inflate_ratio)),
      tenants_(settings.tenants) {}

const hookhost::HookModel* KServeService::Find(std::string_view name) const {
  for (const hookhost::HookModel& m : models_) {
    if (m.name == name && !m.unloaded) {
      return &m;
    }
  }
  return nullptr;
}

void KServeService::SetDraining() {
  // Dekker-style with Submit (both sequentially consistent): a Submit that read draining_
  // false had raised submitting_ first, so this wait sees it and outlasts its host call.
  draining_.store(true);
  while (submitting_.load() != 0) {
    std::this_thread::yield();
  }
}

void KServeService::Submit(const hookhost::HookModel& model,
                           const std::shared_ptr<ParsedInfer>& request,
                           hookhost::InferCallback done) {
  submitting_.fetch_add(1);
  struct Leave {
    std::atomic<int>* n;
    ~Leave() { n->fetch_sub(1); }
  } leave{&submitting_};
  if (draining_.load()) {  // The host may be gone already: not counted.
    done(Unavailable("this hook host is draining; retry on another"));
    return;
  }
  auto refuse = [&](Error error) {
    host_->CountRefused(&model, error);
    done(std::move(error));
  };
  request->request.priority = request->priority;
  if (!request->tenant.empty()) {
    auto it = std::find(tenants_.begin(), tenants_.end(), request->tenant);
    if (it == tenants_.end()) {
      std::string declared;
      for (const std::string& t : tenants_) {
        declared += (declared.empty() ? "" : ", ") + t;
      }
      refuse(InvalidArgument("tenant '" + request->tenant.substr(0, 64) +
                             "' is not declared in the node file's [frontend] tenants (" +
                             (declared.empty() ? "none" : declared) + ")"));
      return;
    }
    request->request.tenant = static_cast<uint32_t>(it - tenants_.begin()) + 1;
  }
  request->request.model = &model;
  if (request->timeout_us > 0) {
    request->request.deadline_ns = MonotonicNs() + request->timeout_us * 1000;
  }
  host_->Submit(request->request, std::move(done));
}

void KServeService::CountRefused(const hookhost::HookModel* model, const Error& error) {
  submitting_.fetch_add(1);  // As Submit: the host is not destroyed meanwhile.
  if (!draining_.load()) {
    host_->CountRefused(model, error);
  }
  submitting_.fetch_sub(1);
}

namespace {

// A readiness probe waits this long for a worker's status to settle: 16 quick attempts
// answered a ready node 503 on a busy host. A status torn for longer counts as not ready.
constexpr int64_t kProbePatienceNs = 20'000'000;

Result<shm::StatusSnapshotData> ProbeStatus(const shm::Segment& segment, uint32_t slot) {
  return shm::ReadSettledStatus(segment, slot, kProbePatienceNs);
}

}  // namespace

bool KServeService::ModelReady(const hookhost::HookModel& model) const {
  if (model.failure || draining_.load()) {
    return false;
  }
  if (model.pipeline()) {  // Ready when every model it calls is.
    return std::all_of(model.calls.begin(), model.calls.end(),
                       [&](uint32_t callee) { return ModelReady(models_[callee]); });
  }
  for (uint32_t w = 0; w < segment_.workers(); ++w) {
    Result<shm::StatusSnapshotData> s = ProbeStatus(segment_, segment_.WorkerSlot(w));
    if (!s.ok() || s->state != static_cast<uint32_t>(shm::ProcessState::kReady)) {
      continue;
    }
    for (uint32_t m = 0; m < s->num_models && m < shm::kMaxStatusModels; ++m) {
      if (ModelState(s->models[m]) == model.name &&
          s->models[m].state == static_cast<uint32_t>(shm::ModelLoadState::kReady)) {
        return true;
      }
    }
  }
  return false;
}

json KServeService::RepositoryIndex(bool ready_only) const {
  json index = json::array();
  for (const hookhost::HookModel& m : models_) {
    if (m.unloaded) {
      continue;
    }
    bool ready = ModelReady(m);
    if (ready_only && !ready) {
      continue;
    }
    json entry = {{"name", m.name}, {"state", ready ? "READY" : "UNAVAILABLE"}};
    if (!m.failure) {
      entry["version"] = std::to_string(m.manifest().version);
    }
    if (!ready) {
      entry["reason"] = m.failure          ? m.failure->message
                        : draining_.load() ? "this hook host is draining"
                                           : "no worker serves it now";
    }
    index.push_back(entry);
  }
  return index;
}

json KServeService::LoadJson() const {
  std::vector<shm::WorkerLoad> workers;
  for (uint32_t w = 0; w < segment_.workers(); ++w) {
    Result<shm::StatusSnapshotData> s = ProbeStatus(segment_, segment_.WorkerSlot(w));
    workers.push_back(shm::LoadOfWorker(w, s.ok() ? &*s : nullptr));
  }
  shm::NodeLoad load = shm::ComputeNodeLoad(std::move(workers), draining_.load());
  json out = {{"state", load.state}, {"weight", load.weight}, {"workers", json::array()}};
  for (const shm::WorkerLoad& w : load.workers) {
    out["workers"].push_back({{"index", w.index},
                              {"ready", w.ready},
                              {"outstanding", w.outstanding},
                              {"queued", w.queued}});
  }
  return out;
}

Result<std::vector<ModelStatistics>> KServeService::Statistics(std::string_view name,
                                                               std::string_view version) const {
  std::vector<const hookhost::HookModel*> chosen;
  if (name.empty()) {
    for (const hookhost::HookModel& m : models_) {
      if (!m.unloaded && !m.failure) {
        chosen.push_back(&m);
      }
    }
  } else {
    const hookhost::HookModel* model = Find(name);
    if (model == nullptr) {
      return NotFound("unknown model '" + std::string(name.substr(0, 128)) + "'");
    }
    if (!version.empty() &&
        (model->failure || version != std::to_string(model->manifest().version))) {
      return NotFound("model '" + model->name + "' has no version '" +
                      std::string(version.substr(0, 32)) + "'");
    }
    chosen.push_back(model);
  }
  std::vector<shm::StatusSnapshotData> workers;
  for (uint32_t w = 0; w < segment_.workers(); ++w) {
    Result<shm::StatusSnapshotData> s = ProbeStatus(segment_, segment_.WorkerSlot(w));
    if (s.ok()) {
      workers.push_back(std::move(*s));
    }
  }
  std::vector<ModelStatistics> out;
  for (const hookhost::HookModel* m : chosen) {
    std::string v = m->failure ? "" : std::to_string(m->manifest().version);
    out.push_back(SumModelStatistics(m->name, v, workers));
  }
  return out;
}

bool KServeService::ServerReady() const {
  if (draining_.load()) {
    return false;
  }
  for (uint32_t w = 0; w < segment_.workers(); ++w) {
    Result<shm::StatusSnapshotData> s = ProbeStatus(segment_, segment_.WorkerSlot(w));
    if (s.ok() && s->state == static_cast<uint32_t>(shm::ProcessState::kReady)) {
      return true;
    }
  }
  return false;
}

namespace {

net::HttpResponse MethodNotAllowed(const net::HttpRequest& request) {
  return Json(405, {{"error", request.method + " is not allowed on " +
                                  std::string(request.target.substr(0, 256))}});
}

net::HttpResponse NoSuchEndpoint(const net::HttpRequest& request) {
  return Json(404, {{"error", "no such endpoint: " + std::string(request.target.substr(0, 256))}});
}

}  // namespace

void KServeService::Handle(net::HttpRequest&& request, net::Responder respond) {
  // A valid W3C traceparent: every answer to this request carries it, errors and refusals too.
  std::optional<TraceContext> trace;
  if (const std::string* tp = request.Header("traceparent")) {
    trace = ParseTraceparent(*tp);
  }
  if (trace) {
    respond = [inner = std::move(respond), header = trace->header](net::HttpResponse r) {
      r.headers.emplace_back("traceparent", header);
      inner(std::move(r));
    };
  }
  std::vector<std::string_view> parts = PathParts(request.target);
  bool get = request.method == "GET";
  if (parts.empty() || parts[0] != "v2") {
    respond(Json(404, {{"error", "no such endpoint; the API is under /v2"}}));
    return;
  }
  if (parts.size() == 1) {
    respond(get ? Json(200, ServerMetadata()) : MethodNotAllowed(request));
    return;
  }
  if (parts[1] == "health" && parts.size() == 3 && (parts[2] == "live" || parts[2] == "ready")) {
    if (!get) {
      respond(MethodNotAllowed(request));
    } else if (parts[2] == "live") {
      respond(Json(200, {{"live", true}}));
    } else {
      bool ready = ServerReady();
      respond(Json(ready ? 200 : 400, {{"ready", ready}}));
    }
    return;
  }
  if (parts[1] == "repository") {
    respond(Repository(parts, request));
    return;
  }
  if (parts[1] == "ferry" && parts.size() == 3 && parts[2] == "load") {
    respond(get ? Json(200, LoadJson()) : MethodNotAllowed(request));
    return;
  }
  if (parts[1] != "models" || parts.size() < 3) {
    respond(NoSuchEndpoint(request));
    return;
  }
  if (parts.size() == 3 && parts[2] == "stats") {
    respond(get ? StatisticsResponse({}, {}) : MethodNotAllowed(request));
    return;
  }
  HandleModel(parts, std::move(request), trace, std::move(respond));
}

net::HttpResponse KServeService::Repository(const std::vector<std::string_view>& parts,
                                            const net::HttpRequest& request) const {
  if (request.method != "POST") {
    return MethodNotAllowed(request);
  }
  if (parts.size() == 3 && parts[2] == "index") {
    // The body is a flat object ({"ready": true}): anything deeper is not one (and is not
    // handed to a recursive parser).
    json body =
        JsonDepthWithin(request.body, 4) ? json::parse(request.body, nullptr, false) : json();
    bool ready_only = body.is_object() && body.value("ready", false);
    return Json(200, RepositoryIndex(ready_only));
  }
  if (parts.size() == 5 && parts[2] == "models" && (parts[4] == "load" || parts[4] == "unload")) {
    return Json(403, {{"error", kModelControlRefusal}});
  }
  return NoSuchEndpoint(request);
}

net::HttpResponse KServeService::StatisticsResponse(std::string_view name,
                                                    std::string_view version) const {
  Result<std::vector<ModelStatistics>> stats = Statistics(name, version);
  return stats.ok() ? Json(200, StatisticsJson(*stats)) : ErrorResponse(stats.error());
}

void KServeService::HandleModel(const std::vector<std::string_view>& parts,
                                net::HttpRequest&& request,
                                const std::optional<TraceContext>& trace, net::Responder respond) {
  bool get = request.method == "GET";
  const hookhost::HookModel* model = Find(parts[2]);
  if (model == nullptr) {
    Error unknown = NotFound("unknown model '" + std::string(parts[2].substr(0, 128)) + "'");
    if (parts.back() == "infer") {
      CountRefused(nullptr, unknown);
    }
    respond(ErrorResponse(unknown));
    return;
  }
  size_t next = 3;
  if (parts.size() >= 5 && parts[3] == "versions") {
    bool known = !model->failure && parts[4] == std::to_string(model->manifest().version);
    if (!known) {
      respond(Json(404, {{"error", "model '" + model->name + "' has no version '" +
                                       std::string(parts[4].substr(0, 32)) + "'"}}));
      return;
    }
    next = 5;
  }
  std::string_view action = parts.size() > next ? parts[next] : "";
  if (parts.size() > next + 1) {
    respond(NoSuchEndpoint(request));
    return;
  }
  if (action == "ready") {
    bool ready = ModelReady(*model);
    respond(get ? Json(ready ? 200 : 400, {{"name", model->name}, {"ready", ready}})
                : MethodNotAllowed(request));
    return;
  }
  if (action == "infer") {
    if (request.method != "POST") {
      respond(MethodNotAllowed(request));
      return;
    }
    Infer(*model, std::move(request), trace, std::move(respond));
    return;
  }
  if (model->failure) {
    respond(ErrorResponse(
        Unavailable("model '" + model->name + "' failed to load: " + model->failure->message)));
    return;
  }
  if (action.empty()) {
    respond(get ? Json(200, ModelMetadata(model->manifest())) : MethodNotAllowed(request));
  } else if (action == "config") {
    respond(get ? Json(200, ModelConfig(model->manifest())) : MethodNotAllowed(request));
  } else if (action == "stats") {
    std::string_view version = next == 5 ? parts[4] : std::string_view();
    respond(get ? StatisticsResponse(model->name, version) : MethodNotAllowed(request));
  } else {
    respond(NoSuchEndpoint(request));
  }
}

void KServeService::Infer(const hookhost::HookModel& model, net::HttpRequest&& request,
                          const std::optional<TraceContext>& trace, net::Responder respond) {
  if (draining_.load()) {
    respond(ErrorResponse(Unavailable("this hook host is draining; retry on another")));
    return;
  }
  bool heavy =
      request.body.size() > kInlineParseBytes || request.Header("Content-Encoding") != nullptr;
  if (!heavy) {
    ParseAndSubmit(model, std::move(request), trace, std::move(respond));
    return;
  }
  // As Submit: counted before the draining check, so the host outlives the task.
  submitting_.fetch_add(1);
  if (draining_.load()) {
    submitting_.fetch_sub(1);
    respond(ErrorResponse(Unavailable("this hook host is draining; retry on another")));
    return;
  }
  auto moved = std::make_shared<net::HttpRequest>(std::move(request));
  host_->RunOnHookThread([this, &model, moved, trace, respond = std::move(respond)]() mutable {
    ParseAndSubmit(model, std::move(*moved), trace, std::move(respond));
    submitting_.fetch_sub(1);
  });
}

void KServeService::ParseAndSubmit(const hookhost::HookModel& model, net::HttpRequest&& request,
                                   const std::optional<TraceContext>& trace,
                                   net::Responder respond) {
  // A request refused before it reaches the flow, counted with the answered ones; `status`
  // overrides the code's HTTP status.
  auto refuse = [&](const Error& error, int status = 0) {
    CountRefused(&model, error);
    net::HttpResponse r = ErrorResponse(error);
    if (status != 0) {
      r = Json(status, {{"error", error.message}});
    }
    respond(std::move(r));
  };
  // The body must outlive the submission (input spans point into it).
  auto body = std::make_shared<std::string>(std::move(request.body));
  if (const std::string* ce = request.Header("Content-Encoding")) {
    std::optional<net::Encoding> encoding = net::ParseContentEncoding(*ce);
    if (!encoding) {
      refuse(InvalidArgument("Content-Encoding '" + ce->substr(0, 32) +
                             "' is not supported (gzip, deflate, identity)"),
             415);
      return;
    }
    Result<std::string> inflated =
        net::Inflate(*body, *encoding, max_request_bytes_, max_inflate_ratio_);
    if (!inflated.ok()) {
      refuse(inflated.error(), inflated.error().code == ErrorCode::kResourceExhausted ? 413 : 0);
      return;
    }
    *body = std::move(*inflated);
  }
  net::Encoding answer_encoding = net::Encoding::kIdentity;
  if (const std::string* ae = request.Header("Accept-Encoding")) {
    answer_encoding = net::ChooseEncoding(*ae);
  }
  Result<ParsedInfer> parsed = InvalidArgument("unset");
  const std::string* header_length = request.Header("Inference-Header-Content-Length");
  if (header_length != nullptr) {
    size_t json_bytes = 0;
    auto [end, ec] = std::from_chars(header_length->data(),
                                     header_length->data() + header_length->size(), json_bytes);
    if (ec != std::errc() || end != header_length->data() + header_length->size() ||
        json_bytes > body->size()) {
      refuse(InvalidArgument("Inference-Header-Content-Length '" + header_length->substr(0, 32) +
                             "' is not a length within the body of " +
                             std::to_string(body->size()) + " bytes"));
      return;
    }
    std::string_view all(*body);
    parsed = json_bytes == 0 ? ParseRawInferRequest(model.manifest(), all)
                             : ParseInferRequest(all.substr(0, json_bytes), all.substr(json_bytes));
  } else {
    parsed = ParseInferRequest(*body, {});
  }
  if (!parsed.ok()) {
    refuse(parsed.error());
    return;
  }
  auto state = std::make_shared<ParsedInfer>(std::move(*parsed));
  if (const std::string* tenant = request.Header("Ferry-Tenant")) {
    if (Status merged = MergeTenant(*state, *tenant, "Ferry-Tenant header"); !merged.ok()) {
      refuse(merged.error());
      return;
    }
  }
  state->request.cancel = std::move(request.cancel);
  ApplyTrace(trace, *state);
  std::string name = model.name;
  int64_t version = model.manifest().version;
  // The request's spans point into `body` and `state->storage`, both kept by the callback.
  Submit(model, state,
         [state, body, respond, name, version,
          answer_encoding](Result<hookhost::InferResponse> result) {
           if (!result.ok()) {
             respond(ErrorResponse(result.error()));
             return;
           }
           Result<EncodedResponse> encoded = EncodeInferResponse(name, version, *state, *result);
           if (!encoded.ok()) {
             respond(ErrorResponse(encoded.error()));
             return;
           }
           net::HttpResponse r;
           r.status = 200;
           if (encoded->binary) {
             r.headers.emplace_back("Content-Type", "application/octet-stream");
             r.headers.emplace_back("Inference-Header-Content-Length",
                                    std::to_string(encoded->json_bytes));
           } else {
             r.headers.emplace_back("Content-Type", "application/json");
           }
           r.body = std::move(encoded->body);
           if (answer_encoding != net::Encoding::kIdentity && r.body.size() >= 512) {
             r.body = net::Deflate(r.body, answer_encoding);
             r.headers.emplace_back("Content-Encoding",
                                    std::string(net::EncodingName(answer_encoding)));
           }
           respond(std::move(r));
         });
}

}  // namespace ferry::frontend
