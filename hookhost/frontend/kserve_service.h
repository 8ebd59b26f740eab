// The KServe v2 HTTP endpoints of a hook host: routes requests to the metadata documents and
// to the hook host's request flow (hookhost.h), and maps ferry's errors to HTTP.
//
//   GET  /v2/health/live                      200 {"live": true}
//   GET  /v2/health/ready                     200 {"ready": true} | 400 {"ready": false}
//   GET  /v2                                  server metadata
//   GET  /v2/models/M[/versions/V]            model metadata
//   GET  /v2/models/M[/versions/V]/ready      200 | 400 {"name": M, "ready": ...}
//   GET  /v2/models/M[/versions/V]/config     Triton's model configuration subset
//   GET  /v2/models[/M[/versions/V]]/stats    the statistics extension (model_statistics.h)
//   POST /v2/models/M[/versions/V]/infer      JSON or binary tensors
//
// Errors: {"error": "..."} with INVALID_ARGUMENT 400, NOT_FOUND 404, RESOURCE_EXHAUSTED 429
// (+ Retry-After), DEADLINE_EXCEEDED 504, UNAVAILABLE 503 (+ Retry-After), INTERNAL 500;
// an unknown path 404, a wrong method 405; CANCELLED 499 (nobody reads it: the client left).
// Priority: the "priority" parameter, 0 (default) or 1 (most urgent) .. 3. Tenant: the
// "tenant" parameter or the Ferry-Tenant header (both: they must agree), one of the node
// file's [frontend] tenants. A client closing its connection cancels its requests. Ready: the hook
// host is not draining, and some worker reports ready with the model loaded. A W3C traceparent
// header is accepted, its trace id carried with the request and echoed in the response's
// traceparent. Bodies may be compressed both ways (compression.h): Content-Encoding gzip/deflate on
// the request (415 for another), Accept-Encoding on the answer.
//
// Thread safety: Handle is called from the HTTP thread (and parses there, or on a hook thread
// for a large or compressed body); answers come from hook threads (a cancelled request's from
// the thread that fired its cancel signal: HTTP's or gRPC's).
// Lifetime: the segment, models and host outlive the service and its answers.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "hookhost/frontend/auth.h"
#include "hookhost/frontend/kserve_codec.h"
#include "hookhost/frontend/log_endpoint.h"
#include "hookhost/frontend/model_statistics.h"
#include "hookhost/frontend/repository_control.h"
#include "hookhost/frontend/trace_endpoint.h"
#include "hookhost/hook_models.h"
#include "hookhost/hookhost.h"
#include "net/http_server.h"
#include "shm/segment.h"

namespace ferry::frontend {

class KServeService {
 public:
  // Infer bodies up to this size are parsed on the I/O thread (about 15 us for 16 KB of
  // JSON: docs/benchmarks.md); larger or compressed ones on a hook thread.
  static constexpr size_t kInlineParseBytes = 64 << 10;

  // From `settings`: max_request_bytes also bounds what a compressed body may inflate to, as
  // does max_inflate_ratio; tenants are the names a request may give as its tenant.
  // `auth`: who may call what (auth.h); nullptr: anyone may call anything.
  // `regions`: the hook host's region socket (system shared memory); nullptr: the extension
  // answers UNAVAILABLE and requests naming a region are refused.
  KServeService(const shm::Segment& segment, const std::vector<hookhost::HookModel>& models,
                hookhost::HookHost* host, const FrontendSettings& settings,
                const Authenticator* auth = nullptr, shm::TraceStore* traces = nullptr,
                ClientRegions* regions = nullptr);
  // Waits as SetDraining does. A large or compressed body is parsed on a hook thread, which
  // touches this service last just after the request's answer was handed over: the caller
  // may have its answer, and destroy the service, before that thread has left.
  ~KServeService();

  void Handle(net::HttpRequest&& request, net::Responder respond);

  // Shared with the gRPC front end (grpc_service.h). The model `name` at `version` (decimal,
  // as clients send it); with no version, its newest version that loaded (else its newest):
  // Triton's choice for a request without one. Null when there is none (an unloaded index
  // is never found).
  const hookhost::HookModel* Find(std::string_view name, std::string_view version = {}) const;
  // The versions of `name` served (loaded or failed), ascending, as decimal strings.
  std::vector<std::string> Versions(std::string_view name) const;
  // A worker serves it and the node is not draining; a pipeline: every model it calls is ready.
  // Each waits up to 20 ms for a worker's status caught mid-publish to settle.
  bool ModelReady(const hookhost::HookModel& model) const;
  // GET /v2/ferry/load: the node's state and weight for a balancer (shm/node_load.h), from
  // the workers' status and this hook host's draining.
  nlohmann::json LoadJson() const;
  bool ServerReady() const;
  // The repository extension's index: one entry per model served ({name, version, state
  // READY or UNAVAILABLE, reason}), only the ready ones when `ready_only`.
  // `tenant`: the caller's (Authorize); only the models it may see are listed.
  nlohmann::json RepositoryIndex(bool ready_only, uint32_t tenant = 0) const;
  // The statistics extension: every model served that has not failed (`name` empty), or
  // `name`'s (at `version`, when not empty), summed over the workers' statuses; a worker whose
  // status stays torn is left out. NOT_FOUND for an unknown model or version.
  Result<std::vector<ModelStatistics>> Statistics(std::string_view name, std::string_view version,
                                                  uint32_t tenant = 0) const;
  // The caller's tenant number from its Authorization value (auth.h; 0: anonymous), or
  // UNAUTHENTICATED / PERMISSION_DENIED. Always 0 without an Authenticator.
  // `tls_subject`: the connection's verified client certificate (empty: none).
  Result<uint32_t> Authorize(const std::string* authorization, std::string_view tls_subject,
                             Endpoint endpoint, std::string_view model) const;
  // gRPC connections through TLS: the client certificate's subject by gRPC's name for the
  // connection ("fd:N"), recorded as each is handed to gRPC (a reused number is recorded
  // again before its first call). Any thread.
  void SetPeerSubject(const std::string& peer, const std::string& subject);
  std::string PeerSubject(const std::string& peer) const;
  // The key's tenant becomes the request's; a request naming another tenant is
  // PERMISSION_DENIED. Nothing for tenant 0.
  Status ApplyKeyTenant(ParsedInfer& request, uint32_t tenant) const;
  // Why the repository extension's load and unload are refused on a node that has not
  // turned them on.
  static constexpr const char* kModelControlRefusal =
      "model load and unload are off on this node: [frontend] model_control = true in the "
      "node file turns them on (ferryctl load / unload work either way)";
  // The repository extension's load or unload of `model` (docs/frontend.md, "Repository"),
  // carried to ferryd (repository_control.h); `max_batch_size` a load's cap (0: none).
  // `done` runs once: on the control's thread when ferryd answers, or here when refused
  // (PERMISSION_DENIED without [frontend] model_control; INVALID_ARGUMENT for a name that is
  // not one). Authorization is the caller's (an admin's, auth.h Endpoint::kAdmin).
  void RepositoryChange(shm::RepositoryOp op, const std::string& model, int64_t max_batch_size,
                        RepositoryControl::Done done);
  // A load's or unload's parameters (Triton's: a load's `config`, an unload's
  // `unload_dependents`): the batch cap a config override sets (0: none). INVALID_ARGUMENT
  // naming a parameter or config key that does not map onto a ferry bundle.
  static Result<int64_t> LoadParameters(shm::RepositoryOp op, const std::string& model,
                                        const nlohmann::json& parameters);
  // Triton's config override (JSON text): only `name` (the model's own) and `max_batch_size`.
  static Result<int64_t> ConfigOverrideCap(const std::string& model, std::string_view config);
  // A repository change waits for ferryd's answer; and ending it (answered UNAVAILABLE), for
  // a front end that stops (FrontEnd::Drained, Stop). Any thread.
  bool RepositoryChangePending() { return repository_ != nullptr && repository_->pending(); }
  void CancelRepositoryChange() {
    if (repository_ != nullptr) {
      repository_->Cancel();
    }
  }
  // The front end has seen its drain (FrontEnd::Drain): an answer written from now on closes
  // its connection. Any thread.
  void SetDrainSeen() { drain_seen_ns_.store(MonotonicNs()); }
  // Drain seen and its grace over: every connection idle at the drain has been closed, so a
  // repository answer written now is followed by no request this hook host serves with its
  // old model table (requests already sent are answered with it; they came before).
  bool DrainSettled() const;
  // Submits a parsed request for `model`, as this service resolved it (its spans must stay
  // valid until this returns); `done` runs once, on a hook thread or here. UNAVAILABLE while
  // draining; INVALID_ARGUMENT for a tenant not declared. The request itself is checked once,
  // by HookHost::Submit (a failed model, its tensors); its priority was checked when decoded.
  // Inputs in client regions are read first, on a hook thread; outputs asked into client
  // regions are written there before `done` sees the answer (an error if that fails).
  void Submit(const hookhost::HookModel& model, const std::shared_ptr<ParsedInfer>& request,
              hookhost::InferCallback done);
  // At most this many requests wait for a hook thread to parse them, or are being parsed
  // (Offload); more are refused at once, so a flood of large requests neither queues without
  // bound in memory nor holds the plugins' work behind it.
  static constexpr int kMaxOffloaded = 64;
  // Runs `task` on a hook thread, after the tasks queued before it: the parsing of a large
  // or compressed request, kept off the thread that serves every other connection (HTTP's
  // I/O thread, gRPC's queue thread); `admitted` is OK there. Runs it here instead with
  // `admitted` an error when the request may not go: DrainingError() while this service
  // drains (the hook host may be gone), RESOURCE_EXHAUSTED with kMaxOffloaded already
  // offloaded; the task then counts and answers that error (CountRefused) and touches
  // nothing else. SetDraining and the destructor wait until the task has run or been
  // dropped. Any thread.
  void Offload(std::function<void(const Status& admitted)> task);
  // Requests offloaded and not yet done with (at most kMaxOffloaded).
  int offloaded() const { return offloaded_.load(); }
  // What an infer request is answered while this service drains.
  static Error DrainingError() {
    return Unavailable("this hook host is draining; retry on another");
  }
  // Draining: readiness reports false and infer requests get 503. Returns once no call into
  // the hook host is in progress (from HTTP's or gRPC's threads); from then on the service
  // never calls it, so the hook host may be destroyed.
  void SetDraining();
  // A request for `model` refused before Submit (unparsable, mistyped; nullptr: an infer for
  // a model not served), counted by the host with the answered ones; not once draining (the
  // host may be gone).
  void CountRefused(const hookhost::HookModel* model, const Error& error);
  // The system shared-memory extension's registry client (nullptr: not served here).
  ClientRegions* regions() const { return regions_; }

 private:
  // Submit's part for requests naming client regions: true when it took the request (its
  // inputs being read on a hook thread, or refused); else `done` wrapped to write the outputs.
  bool SharedMemoryStep(const hookhost::HookModel& model,
                        const std::shared_ptr<ParsedInfer>& request, hookhost::InferCallback& done);
  // /v2/logging: GET the node's log settings, POST changes to them (log_endpoint.h).
 public:
  // Shared by HTTP and gRPC: `changes` empty answers the settings, else applies them first.
  Result<nlohmann::json> LogSettingsCall(const nlohmann::json& changes);
  // The trace extension, likewise (trace_endpoint.h); UNAVAILABLE changing them on a node
  // without [trace] otlp_endpoint.
  Result<nlohmann::json> TraceSettingsCall(const nlohmann::json& changes);

 private:
  net::HttpResponse Logging(const net::HttpRequest& request);
  // /v2/trace/setting and /v2/models/M/trace/setting (GET; POST on the node's only).
  net::HttpResponse TraceSetting(const std::vector<std::string_view>& parts,
                                 const net::HttpRequest& request);
  static constexpr size_t kMaxLogSettingsBytes = 4096;
  // /v2/repository/...: the index; load and unload refused (ferryd's control socket changes
  // what a node serves).
  net::HttpResponse Repository(const std::vector<std::string_view>& parts,
                               const net::HttpRequest& request, uint32_t tenant) const;
  // POST /v2/repository/models/M/load and .../unload.
  void RepositoryHttp(const std::vector<std::string_view>& parts, const net::HttpRequest& request,
                      net::Responder respond);
  // This hook host drains, or ferryd has begun to stop the node (its drain notice).
  bool Stopping() const { return draining_.load() || segment_.node_stopping().load() != 0; }
  // GET /v2/models[/M[/versions/V]]/stats: Statistics as JSON.
  net::HttpResponse StatisticsResponse(std::string_view name, std::string_view version,
                                       uint32_t tenant) const;
  // /v2/models/M[/versions/V][/ready|/infer|/config|/stats]: `parts` is the target's path.
  void HandleModel(const std::vector<std::string_view>& parts, net::HttpRequest&& request,
                   const std::optional<TraceContext>& trace, uint32_t tenant,
                   net::Responder respond);
  // `trace`: the request's valid traceparent (Handle has `respond` echo it already). A body
  // over kInlineParseBytes or compressed is inflated and parsed on a hook thread; a smaller
  // one here, on the I/O thread, where parsing it costs less than the hand-off would.
  // `tenant`: the caller's key's (0: none).
  void Infer(const hookhost::HookModel& model, net::HttpRequest&& request,
             const std::optional<TraceContext>& trace, uint32_t tenant, net::Responder respond);
  void ParseAndSubmit(const hookhost::HookModel& model, net::HttpRequest&& request,
                      const std::optional<TraceContext>& trace, uint32_t tenant,
                      net::Responder respond);

  const shm::Segment& segment_;
  const std::vector<hookhost::HookModel>& models_;
  hookhost::HookHost* host_;
  size_t max_request_bytes_;
  uint64_t max_inflate_ratio_;
  std::vector<std::string> tenants_;
  const Authenticator* auth_;
  std::optional<LogEndpoint> log_;         // On a hook host's slot only (not in tests' views).
  std::optional<TraceEndpoint> trace_;     // Likewise.
  std::atomic<int64_t> drain_seen_ns_{0};  // MonotonicNs when seen; 0: not draining.
  ClientRegions* regions_;
  // With [frontend] model_control on a hook host's slot; else load and unload are refused.
  std::unique_ptr<RepositoryControl> repository_;
  mutable std::mutex peers_mu_;
  std::unordered_map<std::string, std::string> peer_subjects_;  // Guarded by peers_mu_.
  std::atomic<bool> draining_{false};
  std::atomic<int> submitting_{0};  // Calls between the draining check and the host's return.
  std::atomic<int> offloaded_{0};   // Offload's tasks not yet done with.
};

// An Error as an HTTP answer: the status its code maps to and {"error": message}.
net::HttpResponse ErrorResponse(const Error& error);
// `body` as a JSON answer of `status`.
net::HttpResponse JsonAnswer(int status, const nlohmann::json& body);
// 405 naming the method; 404 naming the path.
net::HttpResponse MethodNotAllowed(const net::HttpRequest& request);
net::HttpResponse NoSuchEndpoint(const net::HttpRequest& request);
// /v2/repository/models/M/load or .../unload (the path's parts).
bool IsRepositoryChange(const std::vector<std::string_view>& parts);
// /v2/trace/setting or /v2/models/M/trace/setting.
bool IsTraceSetting(const std::vector<std::string_view>& parts);

}  // namespace ferry::frontend
