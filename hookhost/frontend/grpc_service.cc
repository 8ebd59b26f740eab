#include "hookhost/frontend/grpc_service.h"

#include <absl/synchronization/mutex.h>
#include <errno.h>
#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/server_posix.h>
#include <spdlog/spdlog.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "common/clock.h"
#include "hookhost/frontend/proto/inference.grpc.pb.h"
#include "net/open_connections.h"

namespace ferry::frontend {
namespace {

constexpr int kMaxGrpcThreads = 64;

grpc::Status ToGrpc(const Error& e) {
  grpc::StatusCode code = grpc::StatusCode::INTERNAL;
  switch (e.code) {
    case ErrorCode::kInvalidArgument:
      code = grpc::StatusCode::INVALID_ARGUMENT;
      break;
    case ErrorCode::kNotFound:
      code = grpc::StatusCode::NOT_FOUND;
      break;
    case ErrorCode::kResourceExhausted:
      code = grpc::StatusCode::RESOURCE_EXHAUSTED;
      break;
    case ErrorCode::kDeadlineExceeded:
      code = grpc::StatusCode::DEADLINE_EXCEEDED;
      break;
    case ErrorCode::kUnavailable:
      code = grpc::StatusCode::UNAVAILABLE;
      break;
    case ErrorCode::kInternal:
      code = grpc::StatusCode::INTERNAL;
      break;
    case ErrorCode::kCancelled:
      code = grpc::StatusCode::CANCELLED;
      break;
  }
  return grpc::Status(code, e.message);
}

}  // namespace

namespace {

// A valid W3C traceparent in the call's metadata (one per call: a stream's requests share it).
std::optional<TraceContext> CallTrace(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto tp = metadata.find("traceparent");
  if (tp == metadata.end()) {
    return std::nullopt;
  }
  return ParseTraceparent({tp->second.data(), tp->second.size()});
}

inference::DataType ConfigType(DType dtype) {
  std::string name = "TYPE_" + std::string(KServeName(dtype));
  inference::DataType t = inference::TYPE_INVALID;
  inference::DataType_Parse(name, &t);
  return t;
}

// One ModelInfer call: answered when the hook host answers, no thread waiting for it. A call
// the client cancels (or whose connection drops) cancels its request, which is then answered
// CANCELLED at once. Deletes itself when gRPC is done with the call.
class InferReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit InferReactor(std::shared_ptr<CancelSignal> cancel) : cancel_(std::move(cancel)) {}
  void OnCancel() override { cancel_->Fire(); }
  void OnDone() override { delete this; }

 private:
  std::shared_ptr<CancelSignal> cancel_;
};

class StreamReactor;

// Every method on gRPC's callback API: no call or stream holds a thread while it waits, and
// the server has no synchronous completion queues (throughput measured unchanged against the
// previous server, docs/benchmarks.md; a synchronous stream held one of gRPC's threads). The
// quick methods answer inline through the call's default reactor (Reply).
class Service final : public inference::GRPCInferenceService::CallbackService {
 public:
  explicit Service(KServeService* kserve) : kserve_(kserve) {}

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* call,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* out) override {
    return Reply(call, [&]() -> grpc::Status {
      out->set_live(true);
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* call,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* out) override {
    return Reply(call, [&]() -> grpc::Status {
      out->set_ready(kserve_->ServerReady());
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* call,
                                       const inference::ModelReadyRequest* in,
                                       inference::ModelReadyResponse* out) override {
    return Reply(call, [&]() -> grpc::Status {
      const hookhost::HookModel* model = kserve_->Find(in->name());
      if (model == nullptr) {
        return ToGrpc(NotFound("unknown model '" + in->name().substr(0, 128) + "'"));
      }
      out->set_ready(kserve_->ModelReady(*model));
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* call,
                                            const inference::RepositoryIndexRequest* in,
                                            inference::RepositoryIndexResponse* out) override {
    return Reply(call, [&]() -> grpc::Status {
      for (const nlohmann::json& entry : kserve_->RepositoryIndex(in->ready())) {
        inference::RepositoryIndexResponse::ModelIndex* m = out->add_models();
        m->set_name(entry.value("name", ""));
        m->set_version(entry.value("version", ""));
        m->set_state(entry.value("state", ""));
        m->set_reason(entry.value("reason", ""));
      }
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* RepositoryModelLoad(grpc::CallbackServerContext* call,
                                                const inference::RepositoryModelLoadRequest*,
                                                inference::RepositoryModelLoadResponse*) override {
    return Reply(call, [&]() -> grpc::Status {
      return {grpc::StatusCode::PERMISSION_DENIED, KServeService::kModelControlRefusal};
    });
  }
  grpc::ServerUnaryReactor* RepositoryModelUnload(
      grpc::CallbackServerContext* call, const inference::RepositoryModelUnloadRequest*,
      inference::RepositoryModelUnloadResponse*) override {
    return Reply(call, [&]() -> grpc::Status {
      return {grpc::StatusCode::PERMISSION_DENIED, KServeService::kModelControlRefusal};
    });
  }
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* call,
                                           const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* out) override {
    return Reply(call, [&]() -> grpc::Status {
      nlohmann::json meta = frontend::ServerMetadata();
      out->set_name(meta["name"].get<std::string>());
      out->set_version(meta["version"].get<std::string>());
      for (const auto& e : meta["extensions"]) {
        out->add_extensions(e.get<std::string>());
      }
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* call,
                                          const inference::ModelMetadataRequest* in,
                                          inference::ModelMetadataResponse* out) override {
    return Reply(call, [&]() -> grpc::Status {
      Result<const hookhost::HookModel*> found = Lookup(in->name(), in->version());
      if (!found.ok()) {
        return ToGrpc(found.error());
      }
      const Manifest& m = (*found)->manifest();
      out->set_name(m.name);
      out->add_versions(std::to_string(m.version));
      out->set_platform("ferry");
      auto describe = [](const TensorSpec& t, auto* x) {  // An input or an output alike.
        x->set_name(t.name);
        x->set_datatype(std::string(KServeName(t.dtype)));
        for (int64_t d : t.shape) x->add_shape(d);
      };
      for (const TensorSpec& t : m.client_inputs()) describe(t, out->add_inputs());
      for (const TensorSpec& t : m.client_outputs()) describe(t, out->add_outputs());
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* call,
                                        const inference::ModelConfigRequest* in,
                                        inference::ModelConfigResponse* out) override {
    return Reply(call, [&]() -> grpc::Status {
      Result<const hookhost::HookModel*> found = Lookup(in->name(), in->version());
      if (!found.ok()) {
        return ToGrpc(found.error());
      }
      const Manifest& m = (*found)->manifest();
      int64_t max_batch = MaxBatchSize(m);
      auto* c = out->mutable_config();
      c->set_name(m.name);
      c->set_platform("ferry");
      c->set_backend("ferry");
      c->set_max_batch_size(static_cast<int32_t>(max_batch));
      auto describe = [max_batch](const TensorSpec& t, auto* x) {  // Dims without the batch.
        x->set_name(t.name);
        x->set_data_type(ConfigType(t.dtype));
        for (size_t i = max_batch > 0 ? 1 : 0; i < t.shape.size(); ++i) x->add_dims(t.shape[i]);
      };
      for (const TensorSpec& t : m.client_inputs()) describe(t, c->add_input());
      for (const TensorSpec& t : m.client_outputs()) describe(t, c->add_output());
      return grpc::Status::OK;
    });
  }
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* in,
                                       inference::ModelInferResponse* out) override {
    auto cancel = std::make_shared<CancelSignal>();
    auto* reactor = new InferReactor(cancel);
    // The traceparent in the initial metadata too (none is sent yet), so refusals carry it.
    std::optional<TraceContext> trace = CallTrace(*context);
    if (trace) {
      context->AddInitialMetadata("traceparent", trace->header);
    }
    // `in` and `out` live until the reactor is done, which is after Finish.
    Infer(context, *in, std::move(cancel), trace, out, [reactor](const Status& answered) {
      reactor->Finish(answered.ok() ? grpc::Status::OK : ToGrpc(answered.error()));
    });
    return reactor;
  }
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* call) override;

 private:
  friend class StreamReactor;

  // Answers a quick method inline: `fn` fills the response and returns the call's status.
  template <typename Fn>
  static grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* call, Fn&& fn) {
    grpc::ServerUnaryReactor* reactor = call->DefaultReactor();
    reactor->Finish(fn());
    return reactor;
  }

  // One inference, for ModelInfer and each request of a stream: `in` checked, parsed and
  // submitted, the answer encoded into `out`; then `done(status)`, once, on whichever thread
  // the answer comes (inline when `in` is refused). REQUIRES: `in` and `out` outlive `done`.
  template <typename Done>
  void Infer(grpc::CallbackServerContext* call, const inference::ModelInferRequest& in,
             std::shared_ptr<CancelSignal> cancel, const std::optional<TraceContext>& trace,
             inference::ModelInferResponse* out, Done done) {
    Result<Prepared> prepared = Prepare(call, in, std::move(cancel), trace);
    if (!prepared.ok()) {
      done(Status(prepared.error()));
      return;
    }
    const hookhost::HookModel* model = prepared->model;
    std::shared_ptr<ParsedInfer> state = prepared->state;
    kserve_->Submit(
        *model, state,
        [model, state, out, done = std::move(done)](Result<hookhost::InferResponse> r) {
          done(r.ok() ? EncodeGrpcInfer(model->name, model->manifest().version, *state, *r, out)
                      : Status(r.error()));
        });
  }

  // A model by name (and version, when given) that loaded.
  Result<const hookhost::HookModel*> Lookup(const std::string& name, const std::string& version) {
    const hookhost::HookModel* model = kserve_->Find(name);
    if (model == nullptr) {
      return NotFound("unknown model '" + name.substr(0, 128) + "'");
    }
    if (model->failure) {
      return Unavailable("model '" + model->name + "' failed to load: " + model->failure->message);
    }
    if (!version.empty() && version != std::to_string(model->manifest().version)) {
      return NotFound("model '" + model->name + "' has no version '" + version.substr(0, 32) + "'");
    }
    return model;
  }

  // A request checked and parsed, ready to submit.
  struct Prepared {
    const hookhost::HookModel* model;
    std::shared_ptr<ParsedInfer> state;
  };

  // Looks the model up and parses `in` (refusals counted); the tenant from the call's
  // metadata, `trace` (the call's, CallTrace) carried with it and answered as a "traceparent"
  // response parameter, its deadline (when sooner) as the request's, `cancel` as its cancel
  // signal.
  Result<Prepared> Prepare(grpc::ServerContextBase* context, const inference::ModelInferRequest& in,
                           std::shared_ptr<CancelSignal> cancel,
                           const std::optional<TraceContext>& trace) {
    const auto& metadata = context->client_metadata();
    Result<const hookhost::HookModel*> found = Lookup(in.model_name(), in.model_version());
    if (!found.ok()) {
      kserve_->CountRefused(nullptr, found.error());
      return found.error();
    }
    const hookhost::HookModel* model = *found;
    Result<ParsedInfer> parsed = ParseGrpcInfer(in);
    if (!parsed.ok()) {
      kserve_->CountRefused(model, parsed.error());
      return parsed.error();
    }
    auto state = std::make_shared<ParsedInfer>(std::move(*parsed));
    if (auto tenant = metadata.find("ferry-tenant"); tenant != metadata.end()) {
      Status merged = MergeTenant(*state, {tenant->second.data(), tenant->second.size()},
                                  "ferry-tenant metadata");
      if (!merged.ok()) {
        kserve_->CountRefused(model, merged.error());
        return merged.error();
      }
    }
    ApplyTrace(trace, *state);
    state->request.cancel = std::move(cancel);
    // A gRPC deadline, when sooner, becomes the request's.
    auto deadline = context->deadline();
    if (deadline != std::chrono::system_clock::time_point::max()) {
      int64_t left_us = std::chrono::duration_cast<std::chrono::microseconds>(
                            deadline - std::chrono::system_clock::now())
                            .count();
      left_us = std::max<int64_t>(left_us, 1);
      if (state->timeout_us == 0 || left_us < state->timeout_us) {
        state->timeout_us = left_us;
      }
    }
    return Prepared{model, std::move(state)};
  }

  KServeService* kserve_;
};

// A ModelStreamInfer stream: one request at a time, answered in order, the next read only
// after the answer is written; an error is reported in the stream (error_message) and the
// stream goes on, as Triton does. No thread waits on it: each step starts the next from the
// callback that ends it (read done -> submitted -> answered -> written -> read). A client that
// cancels (or whose connection drops) cancels the request in flight, which is then answered
// CANCELLED at once; the stream ends when the client closes its side or a write fails.
// Deletes itself when gRPC is done with the stream (OnDone, after Finish).
class StreamReactor final : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                                           inference::ModelStreamInferResponse> {
 public:
  StreamReactor(Service* service, grpc::CallbackServerContext* call)
      : service_(service), call_(call), trace_(CallTrace(*call)) {
    StartRead(&in_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);  // The client closed its side; nothing is in flight.
      return;
    }
    auto cancel = std::make_shared<CancelSignal>();
    {
      std::lock_guard lock(mutex_);
      cancel_ = cancel;
      if (cancelled_) {
        cancel->Fire();
      }
    }
    // The parsed request points into `in_`, which is read into again only after this answer
    // is written. The hook host reads a request's bytes only inside Submit (hookhost.h), and
    // answers before Submit returns only a request it refused or one cancelled, whose write
    // then fails and ends the stream (no read follows).
    service_->Infer(call_, in_, std::move(cancel), trace_, answer_.mutable_infer_response(),
                    [this](const Status& answered) {
                      if (answered.ok()) {
                        StartWrite(&answer_);
                      } else {
                        WriteError(answered.error());
                      }
                    });
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status::OK);  // The client is gone.
      return;
    }
    answer_.Clear();
    StartRead(&in_);
  }

  void OnCancel() override {
    std::shared_ptr<CancelSignal> current;
    {
      std::lock_guard lock(mutex_);
      cancelled_ = true;
      current = cancel_;
    }
    if (current != nullptr) {
      current->Fire();  // Outside the lock: firing may answer, and so write, inline.
    }
  }

  void OnDone() override { delete this; }

 private:
  // An error in the stream, in its request's place: its id and model, and the stream's
  // traceparent (every answer carries it, as a successful one does).
  void WriteError(const Error& error) {
    answer_.Clear();
    answer_.set_error_message(error.ToString());
    inference::ModelInferResponse* r = answer_.mutable_infer_response();
    r->set_id(in_.id());
    r->set_model_name(in_.model_name());
    if (trace_) {
      (*r->mutable_parameters())["traceparent"].set_string_param(trace_->header);
    }
    StartWrite(&answer_);
  }

  Service* service_;
  grpc::CallbackServerContext* call_;
  std::optional<TraceContext> trace_;  // The stream's traceparent: on every answer.
  inference::ModelInferRequest in_;
  inference::ModelStreamInferResponse answer_;
  std::mutex mutex_;  // OnCancel runs on any gRPC thread.
  std::shared_ptr<CancelSignal> cancel_;
  bool cancelled_ = false;
};

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
Service::ModelStreamInfer(grpc::CallbackServerContext* call) {
  return new StreamReactor(this, call);
}

}  // namespace

struct GrpcFrontEnd::Impl {
  KServeService* kserve;
  int listen_fd;
  GrpcOptions options;
  net::OpenConnections open;  // The accept thread's.
  std::atomic<uint64_t> refused{0};
  std::unique_ptr<Service> service;
  std::unique_ptr<grpc::Server> server;
  std::thread acceptor;
  std::atomic<bool> accepting{true};
  std::atomic<bool> stopping{false};
};

GrpcFrontEnd::GrpcFrontEnd(KServeService* service, int listen_fd, const GrpcOptions& options)
    : impl_(std::make_unique<Impl>()) {
  impl_->kserve = service;
  impl_->listen_fd = listen_fd;
  impl_->options = options;
}

uint64_t GrpcFrontEnd::refused_connections() const { return impl_->refused.load(); }

GrpcFrontEnd::~GrpcFrontEnd() { Stop(0); }

Status GrpcFrontEnd::Start() {
  Impl& s = *impl_;
  // Debian builds absl with its mutex deadlock detection on: every lock gRPC takes is recorded
  // in one process-wide graph under one global lock (GraphCycles in a profile of the hook host
  // under gRPC load). A debugging aid, not a guard: off for this process (nothing of ferry's
  // own uses absl).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  s.service = std::make_unique<Service>(s.kserve);
  grpc::ServerBuilder builder;
  builder.RegisterService(s.service.get());
  int limit = static_cast<int>(std::min<size_t>(s.options.max_message_bytes, INT32_MAX));
  builder.SetMaxReceiveMessageSize(limit);
  builder.SetMaxSendMessageSize(INT32_MAX);
  // No call or stream holds a thread while it waits (callback API); the callback executor is
  // gRPC's own, sized by gRPC from the CPUs. The quota bounds any further threads gRPC's
  // server would start for calls.
  grpc::ResourceQuota quota("ferry-hookhost");
  quota.SetMaxThreads(kMaxGrpcThreads);
  builder.SetResourceQuota(quota);
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONNECTION_IDLE_MS,
      static_cast<int>(std::clamp<int64_t>(s.options.idle_timeout_ms, 1, INT32_MAX)));
  s.server = builder.BuildAndStart();
  if (s.server == nullptr) {
    return Internal("the gRPC server did not start");
  }
  s.acceptor = std::thread([&s] {
    int epoll_fd = epoll_create1(EPOLL_CLOEXEC);
    epoll_event e{};
    e.events = EPOLLIN | EPOLLEXCLUSIVE;
    epoll_ctl(epoll_fd, EPOLL_CTL_ADD, s.listen_fd, &e);
    while (!s.stopping.load()) {
      epoll_event got{};
      if (epoll_wait(epoll_fd, &got, 1, 50) != 1 || !s.accepting.load()) {
        continue;
      }
      int fd = accept4(s.listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == EMFILE || errno == ENFILE) {  // Still readable: wait, do not spin.
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
        }
        continue;
      }
      if (s.open.AtLeast(s.options.max_connections)) {
        s.refused.fetch_add(1, std::memory_order_relaxed);  // Counted before the client sees it.
        close(fd);
        continue;
      }
      s.open.Add(fd);
      grpc::AddInsecureChannelFromFd(s.server.get(), fd);  // gRPC owns it now.
    }
    close(epoll_fd);
  });
  return OkStatus();
}

void GrpcFrontEnd::Drain() { impl_->accepting.store(false); }

void GrpcFrontEnd::Stop(int deadline_ms) {
  Impl& s = *impl_;
  if (s.server == nullptr) {
    return;
  }
  s.accepting.store(false);
  s.stopping.store(true);
  if (s.acceptor.joinable()) {
    s.acceptor.join();
  }
  s.server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(deadline_ms));
  s.server->Wait();
  s.server.reset();
}

}  // namespace ferry::frontend
