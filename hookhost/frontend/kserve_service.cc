#include "hookhost/frontend/kserve_service.h"

#include <algorithm>
#include <charconv>
#include <chrono>
#include <memory>
#include <thread>

#include "common/clock.h"
#include "hookhost/frontend/kserve_codec.h"
#include "hookhost/frontend/shared_memory_http.h"
#include "net/compression.h"
#include "shm/status.h"

namespace ferry::frontend {
namespace {

using nlohmann::json;

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

// What an /v2/... path is, for the Authenticator, and the model it is about (empty: none).
std::pair<Endpoint, std::string_view> ClassifyPath(const std::vector<std::string_view>& parts) {
  if (parts.size() >= 2 && (parts[1] == "health" || parts[1] == "ferry")) {
    return {Endpoint::kHealth, {}};
  }
  if (IsRepositoryChange(parts)) {
    return {Endpoint::kAdmin, {}};  // Changing what the node serves: an admin's.
  }
  if (IsSharedMemoryPath(parts)) {
    return {Endpoint::kInfer, {}};  // A caller's own regions, to infer with.
  }
  if (parts.size() < 3 || parts[1] != "models") {
    return {Endpoint::kMetadata, {}};  // /v2, the index, or no endpoint at all.
  }
  if (parts.size() == 3 && parts[2] == "stats") {
    return {Endpoint::kStatistics, {}};
  }
  size_t next = parts.size() >= 5 && parts[3] == "versions" ? 5 : 3;
  std::string_view action = parts.size() > next ? parts[next] : "";
  Endpoint endpoint = action == "infer"   ? Endpoint::kInfer
                      : action == "ready" ? Endpoint::kHealth
                      : action == "stats" ? Endpoint::kStatistics
                                          : Endpoint::kMetadata;
  return {endpoint, parts[2]};
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
    case ErrorCode::kUnauthenticated:
      status = 401;
      break;
    case ErrorCode::kPermissionDenied:
      status = 403;
      break;
  }
  net::HttpResponse r = JsonAnswer(status, {{"error", error.message}});
  if (status == 429 || status == 503) {
    // The refusal's own hint (a predicted wait, say) in whole seconds rounded up; else 1.
    int64_t ms = RetryAfterMs(error.message).value_or(1000);
    r.headers.emplace_back("Retry-After", std::to_string(std::max<int64_t>(1, (ms + 999) / 1000)));
  }
  return r;
}

// ferryd answers within kRepositoryWaitNs (300 s); the margin covers its tick.
constexpr int64_t kRepositoryAnswerWaitNs = 310'000'000'000;

KServeService::KServeService(const shm::Segment& segment,
                             const std::vector<hookhost::HookModel>& models,
                             hookhost::HookHost* host, const FrontendSettings& settings,
                             const Authenticator* auth, shm::TraceStore* traces,
                             ClientRegions* regions)
    : segment_(segment),
      models_(models),
      host_(host),
      max_request_bytes_(settings.max_request_bytes),
      max_inflate_ratio_(static_cast<uint64_t>(settings.max_inflate_ratio)),
      tenants_(settings.tenants),
      auth_(auth),
      regions_(regions) {
  if (segment.owner() != shm::kSupervisor && !segment.IsWorkerSlot(segment.owner())) {
    log_.emplace(segment);
    trace_.emplace(traces);
    if (settings.model_control) {
      repository_ = std::make_unique<RepositoryControl>(
          segment.frontend_counters(segment.owner()).repository, [this] { return DrainSettled(); },
          kRepositoryAnswerWaitNs);
    }
  }
}

bool KServeService::DrainSettled() const {
  int64_t seen = drain_seen_ns_.load();
  // The HTTP server closes idle connections one sweep (at most 50 ms) after the grace.
  return seen != 0 && MonotonicNs() - seen > net::kDrainGraceNs + 100'000'000;
}

Result<uint32_t> KServeService::Authorize(const std::string* authorization,
                                          std::string_view tls_subject, Endpoint endpoint,
                                          std::string_view model) const {
  return auth_ == nullptr ? Result<uint32_t>(uint32_t{0})
                          : auth_->Check(authorization, tls_subject, endpoint, model);
}

void KServeService::SetPeerSubject(const std::string& peer, const std::string& subject) {
  std::lock_guard<std::mutex> lock(peers_mu_);
  if (subject.empty()) {
    peer_subjects_.erase(peer);
  } else {
    peer_subjects_[peer] = subject;
  }
}

std::string KServeService::PeerSubject(const std::string& peer) const {
  std::lock_guard<std::mutex> lock(peers_mu_);
  auto it = peer_subjects_.find(peer);
  return it == peer_subjects_.end() ? std::string() : it->second;
}

Status KServeService::ApplyKeyTenant(ParsedInfer& request, uint32_t tenant) const {
  request.caller_tenant = tenant;
  if (tenant == 0 || auth_ == nullptr) {
    return OkStatus();
  }
  std::string name = auth_->TenantName(tenant);
  if (!request.tenant.empty() && request.tenant != name) {
    return PermissionDenied("the API key is tenant '" + name + "''s; the request names tenant '" +
                            request.tenant.substr(0, 64) + "'");
  }
  request.tenant = name;
  return OkStatus();
}

KServeService::~KServeService() { SetDraining(); }

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
    done(DrainingError());
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
  if (SharedMemoryStep(model, request, done)) {
    return;
  }
  if (request->timeout_us > 0) {
    request->request.deadline_ns = MonotonicNs() + request->timeout_us * 1000;
  }
  if (trace_ && trace_->Sample()) {
    // Sampled: its spans go to the trace store when it is answered, errors included.
    done = [trace = &*trace_, inner = std::move(done), index = model.index,
            traceparent = request->traceparent,
            start = MonotonicNs()](Result<hookhost::InferResponse> r) {
      hookhost::RequestTimings t;
      if (r.ok()) {
        t = r->timings;
      } else {
        t.total_ns = MonotonicNs() - start;
      }
      trace->Record(traceparent, index, t, r.ok() ? 0 : static_cast<uint32_t>(r.error().code) + 1);
      inner(std::move(r));
    };
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

net::HttpResponse JsonAnswer(int status, const json& body) {
  net::HttpResponse r;
  r.status = status;
  r.headers.emplace_back("Content-Type", "application/json");
  r.body = body.dump(-1, ' ', false, json::error_handler_t::replace);
  return r;
}

net::HttpResponse MethodNotAllowed(const net::HttpRequest& request) {
  return JsonAnswer(405, {{"error", request.method + " is not allowed on " +
                                        std::string(request.target.substr(0, 256))}});
}

net::HttpResponse NoSuchEndpoint(const net::HttpRequest& request) {
  return JsonAnswer(404,
                    {{"error", "no such endpoint: " + std::string(request.target.substr(0, 256))}});
}

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
    respond(JsonAnswer(404, {{"error", "no such endpoint; the API is under /v2"}}));
    return;
  }
  auto [endpoint, model_name] = ClassifyPath(parts);
  if (((parts.size() == 2 && parts[1] == "logging") || IsTraceSetting(parts)) && !get) {
    endpoint = Endpoint::kAdmin;  // Changing the node's logging or tracing: an admin's.
  }
  Result<uint32_t> tenant =
      Authorize(request.Header("Authorization"), request.tls_subject, endpoint, model_name);
  if (!tenant.ok()) {
    if (endpoint == Endpoint::kInfer) {
      CountRefused(Find(model_name), tenant.error());
    }
    net::HttpResponse refusal = ErrorResponse(tenant.error());
    if (tenant.error().code == ErrorCode::kUnauthenticated) {
      refusal.headers.emplace_back("WWW-Authenticate", "Bearer");
    }
    respond(std::move(refusal));
    return;
  }
  if (parts.size() == 1) {
    respond(get ? JsonAnswer(200, ServerMetadata()) : MethodNotAllowed(request));
    return;
  }
  if (parts[1] == "health" && parts.size() == 3 && (parts[2] == "live" || parts[2] == "ready")) {
    if (!get) {
      respond(MethodNotAllowed(request));
    } else if (parts[2] == "live") {
      respond(JsonAnswer(200, {{"live", true}}));
    } else {
      bool ready = ServerReady();
      respond(JsonAnswer(ready ? 200 : 400, {{"ready", ready}}));
    }
    return;
  }
  if (IsRepositoryChange(parts)) {
    RepositoryHttp(parts, request, std::move(respond));
    return;
  }
  if (parts[1] == "repository") {
    respond(Repository(parts, request, *tenant));
    return;
  }
  if (IsSharedMemoryPath(parts)) {
    respond(SharedMemoryHttp(regions_, parts, request, *tenant));
    return;
  }
  if (parts[1] == "logging" && parts.size() == 2) {
    respond(Logging(request));
    return;
  }
  if (IsTraceSetting(parts)) {
    respond(TraceSetting(parts, request));
    return;
  }
  if (parts[1] == "ferry" && parts.size() == 3 && parts[2] == "load") {
    respond(get ? JsonAnswer(200, LoadJson()) : MethodNotAllowed(request));
    return;
  }
  if (parts[1] != "models" || parts.size() < 3) {
    respond(NoSuchEndpoint(request));
    return;
  }
  if (parts.size() == 3 && parts[2] == "stats") {
    respond(get ? StatisticsResponse({}, {}, *tenant) : MethodNotAllowed(request));
    return;
  }
  HandleModel(parts, std::move(request), trace, *tenant, std::move(respond));
}

net::HttpResponse KServeService::StatisticsResponse(std::string_view name, std::string_view version,
                                                    uint32_t tenant) const {
  Result<std::vector<ModelStatistics>> stats = Statistics(name, version, tenant);
  return stats.ok() ? JsonAnswer(200, StatisticsJson(*stats)) : ErrorResponse(stats.error());
}

void KServeService::HandleModel(const std::vector<std::string_view>& parts,
                                net::HttpRequest&& request,
                                const std::optional<TraceContext>& trace, uint32_t tenant,
                                net::Responder respond) {
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
    model = Find(parts[2], parts[4]);
    if (model == nullptr) {
      respond(JsonAnswer(404, {{"error", "model '" + std::string(parts[2]) + "' has no version '" +
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
    respond(get ? JsonAnswer(ready ? 200 : 400, {{"name", model->name}, {"ready", ready}})
                : MethodNotAllowed(request));
    return;
  }
  if (action == "infer") {
    if (request.method != "POST") {
      respond(MethodNotAllowed(request));
      return;
    }
    Infer(*model, std::move(request), trace, tenant, std::move(respond));
    return;
  }
  if (model->failure) {
    respond(ErrorResponse(
        Unavailable("model '" + model->name + "' failed to load: " + model->failure->message)));
    return;
  }
  if (action.empty()) {
    json metadata = ModelMetadata(model->manifest());
    metadata["versions"] = Versions(model->name);
    respond(get ? JsonAnswer(200, metadata) : MethodNotAllowed(request));
  } else if (action == "config") {
    respond(get ? JsonAnswer(200, ModelConfig(model->manifest())) : MethodNotAllowed(request));
  } else if (action == "stats") {
    std::string_view version = next == 5 ? parts[4] : std::string_view();
    respond(get ? StatisticsResponse(model->name, version, tenant) : MethodNotAllowed(request));
  } else {
    respond(NoSuchEndpoint(request));
  }
}

void KServeService::Infer(const hookhost::HookModel& model, net::HttpRequest&& request,
                          const std::optional<TraceContext>& trace, uint32_t tenant,
                          net::Responder respond) {
  if (draining_.load()) {
    respond(ErrorResponse(DrainingError()));
    return;
  }
  bool heavy =
      request.body.size() > kInlineParseBytes || request.Header("Content-Encoding") != nullptr;
  if (!heavy) {
    ParseAndSubmit(model, std::move(request), trace, tenant, std::move(respond));
    return;
  }
  auto moved = std::make_shared<net::HttpRequest>(std::move(request));
  Offload([this, &model, moved, trace, tenant,
           respond = std::move(respond)](const Status& admitted) mutable {
    if (!admitted.ok()) {
      CountRefused(&model, admitted.error());  // Not counted while draining.
      respond(ErrorResponse(admitted.error()));
      return;
    }
    ParseAndSubmit(model, std::move(*moved), trace, tenant, std::move(respond));
  });
}

void KServeService::Offload(std::function<void(const Status& admitted)> task) {
  // As Submit: counted before the draining check, so the host outlives the task. The count
  // drops when the task is done with, run or not (its last copy is destroyed), so neither
  // SetDraining nor the destructor waits for a task that will never run.
  submitting_.fetch_add(1);
  std::shared_ptr<void> leave(nullptr, [this](void*) { submitting_.fetch_sub(1); });
  if (draining_.load()) {
    task(DrainingError());
    return;
  }
  if (offloaded_.fetch_add(1) >= kMaxOffloaded) {
    offloaded_.fetch_sub(1);
    task(ResourceExhausted("too many large requests wait to be parsed on this hook host (" +
                           std::to_string(kMaxOffloaded) + "); try again"));
    return;
  }
  std::shared_ptr<void> done(nullptr, [this](void*) { offloaded_.fetch_sub(1); });
  host_->RunOnHookThread([task = std::move(task), leave, done] { task(OkStatus()); });
}

void KServeService::ParseAndSubmit(const hookhost::HookModel& model, net::HttpRequest&& request,
                                   const std::optional<TraceContext>& trace, uint32_t tenant,
                                   net::Responder respond) {
  // A request refused before it reaches the flow, counted with the answered ones; `status`
  // overrides the code's HTTP status.
  auto refuse = [&](const Error& error, int status = 0) {
    CountRefused(&model, error);
    net::HttpResponse r = ErrorResponse(error);
    if (status != 0) {
      r = JsonAnswer(status, {{"error", error.message}});
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
    if (json_bytes == 0 && model.failure) {  // A raw body is read by the manifest it lacks.
      refuse(Unavailable("model '" + model.name + "' failed to load: " + model.failure->message));
      return;
    }
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
  if (const std::string* named = request.Header("Ferry-Tenant")) {
    if (Status merged = MergeTenant(*state, *named, "Ferry-Tenant header"); !merged.ok()) {
      refuse(merged.error());
      return;
    }
  }
  if (Status keyed = ApplyKeyTenant(*state, tenant); !keyed.ok()) {
    refuse(keyed.error());
    return;
  }
  state->request.cancel = std::move(request.cancel);
  ApplyTrace(trace, *state);
  std::string name = model.name;
  int64_t version = model.version;  // A failed model has no manifest.
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
