#include "hookhost/frontend/grpc_service.h"

#include <absl/synchronization/mutex.h>
#include <grpc/grpc.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <chrono>
#include <mutex>

#include "common/clock.h"
#include "hookhost/frontend/grpc_admin.h"
#include "hookhost/frontend/grpc_calls.h"
#include "hookhost/frontend/grpc_messages.h"
#include "hookhost/frontend/grpc_raw_service.h"
#include "hookhost/frontend/grpc_stream_sink.h"
#include "hookhost/frontend/proto/inference.grpc.pb.h"

namespace ferry::frontend {
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

class StreamReactor;

// Every method on the completion-queue API (grpc_calls.h): no call or stream holds a thread
// while it waits. The quick methods answer inline (ReplyInline) on the queue's thread; those
// that may wait on ferryd (shared memory, log and trace settings) on the call lane.
class Service final : public RawService, public InferenceService {
 public:
  explicit Service(KServeService* kserve) : kserve_(kserve) {}

  void OnServerLive(UnaryCall& call) {
    ReplyInline<inference::ServerLiveRequest, inference::ServerLiveResponse>(
        call,
        [&](const inference::ServerLiveRequest* in,
            inference::ServerLiveResponse* out) -> grpc::Status {
          if (Result<uint32_t> t = Authorize(call.context(), Endpoint::kHealth, {}); !t.ok()) {
            return ToGrpc(t.error());
          }
          out->set_live(true);
          return grpc::Status::OK;
        });
  }
  void OnServerReady(UnaryCall& call) {
    ReplyInline<inference::ServerReadyRequest, inference::ServerReadyResponse>(
        call,
        [&](const inference::ServerReadyRequest* in,
            inference::ServerReadyResponse* out) -> grpc::Status {
          if (Result<uint32_t> t = Authorize(call.context(), Endpoint::kHealth, {}); !t.ok()) {
            return ToGrpc(t.error());
          }
          out->set_ready(kserve_->ServerReady());
          return grpc::Status::OK;
        });
  }
  void OnModelReady(UnaryCall& call) {
    ReplyInline<inference::ModelReadyRequest, inference::ModelReadyResponse>(
        call,
        [&](const inference::ModelReadyRequest* in,
            inference::ModelReadyResponse* out) -> grpc::Status {
          if (Result<uint32_t> t = Authorize(call.context(), Endpoint::kHealth, in->name());
              !t.ok()) {
            return ToGrpc(t.error());
          }
          Result<const hookhost::HookModel*> model = Lookup(in->name(), in->version(), true);
          if (!model.ok()) {
            return ToGrpc(model.error());
          }
          out->set_ready(kserve_->ModelReady(**model));
          return grpc::Status::OK;
        });
  }
  void OnRepositoryIndex(UnaryCall& call) {
    ReplyInline<inference::RepositoryIndexRequest, inference::RepositoryIndexResponse>(
        call,
        [&](const inference::RepositoryIndexRequest* in,
            inference::RepositoryIndexResponse* out) -> grpc::Status {
          Result<uint32_t> t = Authorize(call.context(), Endpoint::kMetadata, {});
          if (!t.ok()) {
            return ToGrpc(t.error());
          }
          for (const nlohmann::json& entry : kserve_->RepositoryIndex(in->ready(), *t)) {
            inference::RepositoryIndexResponse::ModelIndex* m = out->add_models();
            m->set_name(entry.value("name", ""));
            m->set_version(entry.value("version", ""));
            m->set_state(entry.value("state", ""));
            m->set_reason(entry.value("reason", ""));
          }
          return grpc::Status::OK;
        });
  }
  void OnModelStatistics(UnaryCall& call) {
    ReplyInline<inference::ModelStatisticsRequest, inference::ModelStatisticsResponse>(
        call,
        [&](const inference::ModelStatisticsRequest* in,
            inference::ModelStatisticsResponse* out) -> grpc::Status {
          Result<uint32_t> t = Authorize(call.context(), Endpoint::kStatistics, in->name());
          if (!t.ok()) {
            return ToGrpc(t.error());
          }
          Result<std::vector<frontend::ModelStatistics>> stats =
              kserve_->Statistics(in->name(), in->version(), *t);
          if (!stats.ok()) {
            return ToGrpc(stats.error());
          }
          StatisticsProto(*stats, out);
          return grpc::Status::OK;
        });
  }
  void OnRepositoryModelLoad(UnaryCall& call) {
    RepositoryChangeMethod(kserve_, shm::RepositoryOp::kLoad, call);
  }
  void OnRepositoryModelUnload(UnaryCall& call) {
    RepositoryChangeMethod(kserve_, shm::RepositoryOp::kUnload, call);
  }
  void OnLogSettings(UnaryCall& call) { LogSettingsMethod(kserve_, call); }
  void OnTraceSetting(UnaryCall& call) { TraceSettingMethod(kserve_, call); }
  void OnServerMetadata(UnaryCall& call) {
    ReplyInline<inference::ServerMetadataRequest, inference::ServerMetadataResponse>(
        call,
        [&](const inference::ServerMetadataRequest* in,
            inference::ServerMetadataResponse* out) -> grpc::Status {
          if (Result<uint32_t> t = Authorize(call.context(), Endpoint::kMetadata, {}); !t.ok()) {
            return ToGrpc(t.error());
          }
          nlohmann::json meta = frontend::ServerMetadata();
          out->set_name(meta["name"].get<std::string>());
          out->set_version(meta["version"].get<std::string>());
          for (const auto& e : meta["extensions"]) {
            out->add_extensions(e.get<std::string>());
          }
          return grpc::Status::OK;
        });
  }
  void OnModelMetadata(UnaryCall& call) {
    ReplyInline<inference::ModelMetadataRequest, inference::ModelMetadataResponse>(
        call,
        [&](const inference::ModelMetadataRequest* in,
            inference::ModelMetadataResponse* out) -> grpc::Status {
          if (Result<uint32_t> t = Authorize(call.context(), Endpoint::kMetadata, in->name());
              !t.ok()) {
            return ToGrpc(t.error());
          }
          Result<const hookhost::HookModel*> found = Lookup(in->name(), in->version());
          if (!found.ok()) {
            return ToGrpc(found.error());
          }
          DescribeModel(*kserve_, (*found)->manifest(), out);
          return grpc::Status::OK;
        });
  }
  void OnModelConfig(UnaryCall& call) {
    ReplyInline<inference::ModelConfigRequest, inference::ModelConfigResponse>(
        call,
        [&](const inference::ModelConfigRequest* in,
            inference::ModelConfigResponse* out) -> grpc::Status {
          if (Result<uint32_t> t = Authorize(call.context(), Endpoint::kMetadata, in->name());
              !t.ok()) {
            return ToGrpc(t.error());
          }
          Result<const hookhost::HookModel*> found = Lookup(in->name(), in->version());
          if (!found.ok()) {
            return ToGrpc(found.error());
          }
          DescribeConfig((*found)->manifest(), out->mutable_config());
          return grpc::Status::OK;
        });
  }
  // A ModelInfer call: answered when the hook host answers. A call the client cancels (or
  // whose connection drops) cancels its request, which is then answered CANCELLED at once.
  void OnModelInfer(UnaryCall& call) {
    // The traceparent in the initial metadata too (none is sent yet), so refusals carry it.
    std::optional<TraceContext> trace = CallTrace(call.context());
    if (trace) {
      call.context().AddInitialMetadata("traceparent", trace->header);
    }
    if (call.request_bytes().Length() <= KServeService::kInlineParseBytes) {
      ParseAndInfer(call, trace);  // Parsing costs less than a hand-off would.
      return;
    }
    // A large request is parsed on a hook thread: the queue thread serves every other call.
    kserve_->Offload([this, &call, trace](const Status& admitted) {
      if (!admitted.ok()) {  // Counted under its model, read without parsing its tensors.
        inference::ModelInferRequest header;
        PeekInferHeader(call.request_bytes(), &header);
        kserve_->CountRefused(kserve_->Find(header.model_name(), header.model_version()),
                              admitted.error());
        call.Finish(ToGrpc(admitted.error()));
        return;
      }
      ParseAndInfer(call, trace);
    });
  }

  // ModelInfer's request parsed, inferred and answered.
  void ParseAndInfer(UnaryCall& call, const std::optional<TraceContext>& trace) {
    if (grpc::Status read = ReadMessage(call.request_bytes(), &call.infer_in); !read.ok()) {
      kserve_->CountRefused(nullptr, InvalidArgument(read.error_message()));
      call.Finish(read);
      return;
    }
    // The call and its messages live until it is answered.
    Infer(&call.context(), call.infer_in, call.cancel(), trace, &call.infer_out,
          [&call](const Status& answered) {
            grpc::Status status = answered.ok()
                                      ? WriteMessage(call.infer_out, call.response_bytes())
                                      : ToGrpc(answered.error());
            call.Finish(status);
          });
  }

  grpc::Service* grpc_service() override { return this; }
  void Serve(CallQueue* queue, CallLane* lane, int infer_calls) override;

 private:
  friend class StreamReactor;

  // A decoupled model's responses before its request ends, encoded (ModelStreamInfer).
  using PartialWriter = std::function<Status(inference::ModelInferResponse&&)>;

  // One inference, for ModelInfer and each request of a stream: `in` checked, parsed and
  // submitted, the answer encoded into `out`; then `done(status)`, once, on whichever thread
  // the answer comes (inline when `in` is refused). A decoupled model's responses go to
  // `partial` first (none given: the model is refused). REQUIRES: `in` and `out` outlive
  // `done`.
  template <typename Done>
  void Infer(grpc::ServerContextBase* call, const inference::ModelInferRequest& in,
             std::shared_ptr<CancelSignal> cancel, const std::optional<TraceContext>& trace,
             inference::ModelInferResponse* out, Done done, PartialWriter partial = nullptr) {
    Result<Prepared> prepared = Prepare(call, in, std::move(cancel), trace);
    if (!prepared.ok()) {
      done(Status(prepared.error()));
      return;
    }
    const hookhost::HookModel* model = prepared->model;
    std::shared_ptr<ParsedInfer> state = prepared->state;
    if (partial != nullptr) {
      // Weak: the request holds this callback, and the answer's callback holds the state.
      state->request.on_response = [model, weak = std::weak_ptr<ParsedInfer>(state),
                                    partial =
                                        std::move(partial)](hookhost::InferResponse r) -> Status {
        std::shared_ptr<ParsedInfer> parsed = weak.lock();
        if (parsed == nullptr) {
          return Cancelled("the request was answered already");
        }
        inference::ModelInferResponse message;
        FERRY_RETURN_IF_ERROR(
            EncodeGrpcInfer(model->name, model->version, *parsed, r, &message, true));
        return partial(std::move(message));
      };
    }
    kserve_->Submit(*model, state,
                    [model, state, out, done = std::move(done)](Result<hookhost::InferResponse> r) {
                      // A decoupled request's end has no outputs, whatever it asked for.
                      done(r.ok() ? EncodeGrpcInfer(model->name, model->version, *state, *r, out,
                                                    model->manifest().decoupled)
                                  : Status(r.error()));
                    });
  }

  // A model by name (and version, when given; KServeService::Find) that loaded, or also
  // one that failed with `failed_too`.
  Result<const hookhost::HookModel*> Lookup(const std::string& name, const std::string& version,
                                            bool failed_too = false) {
    if (kserve_->Find(name) == nullptr) {
      return NotFound("unknown model '" + name.substr(0, 128) + "'");
    }
    const hookhost::HookModel* model = kserve_->Find(name, version);
    if (model == nullptr) {
      return NotFound("model '" + name + "' has no version '" + version.substr(0, 32) + "'");
    }
    if (model->failure && !failed_too) {
      return Unavailable("model '" + model->name + "' failed to load: " + model->failure->message);
    }
    return model;
  }

  // The call's "authorization" metadata checked for `endpoint` on `model` (auth.h).
  Result<uint32_t> Authorize(const grpc::ServerContextBase& call, Endpoint endpoint,
                             std::string_view model) {
    return AuthorizeCall(kserve_, call, endpoint, model);
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
    Result<uint32_t> tenant = Authorize(*context, Endpoint::kInfer, in.model_name());
    if (!tenant.ok()) {
      kserve_->CountRefused(kserve_->Find(in.model_name()), tenant.error());
      return tenant.error();
    }
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
    if (Status keyed = kserve_->ApplyKeyTenant(*state, *tenant); !keyed.ok()) {
      kserve_->CountRefused(model, keyed.error());
      return keyed.error();
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
  std::deque<UnaryCall::Method> methods_;  // Serve's; stable addresses for the calls.
  StreamCall::Requester stream_requester_;
};

// A ModelStreamInfer stream: one request at a time, answered in order, the next read only
// after its answers are written (StreamSink); an error is reported in the stream
// (error_message) and the stream goes on, as Triton does. A decoupled model's request may
// have zero, one or many answers, each flagged triton_final_response = false, then (when the
// request asked with triton_enable_empty_final_response) an empty one flagged true. No thread
// waits on the stream: each step starts the next from the callback that ends it. A client
// that cancels (or whose connection drops) cancels the request in flight, which is then
// answered CANCELLED at once (a decoupled model's next send() fails); the stream ends when
// the client closes its side or a write fails. Deletes itself when gRPC is done with the
// stream (OnDone, after Finish).
class StreamReactor final : public StreamCall {
 public:
  explicit StreamReactor(Service* service)
      : service_(service), sink_(std::make_shared<StreamSink>(this)) {}

  void OnStart() override {
    trace_ = CallTrace(context());
    StartRead(&in_bytes_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      sink_->Finish(grpc::Status::OK);  // The client closed its side; nothing is in flight.
      return;
    }
    if (in_bytes_.Length() <= KServeService::kInlineParseBytes) {
      HandleRequest();
      return;
    }
    // A large request is parsed on a hook thread, as OnModelInfer's. It is in flight from
    // here, so the stream is not finished (nor this reactor deleted) under that thread.
    sink_->BeginRequest();
    service_->kserve_->Offload([this](const Status& admitted) {
      if (admitted.ok()) {
        HandleRequest();
        return;
      }
      // The answer's id and model read here without parsing the tensors: a flood past the
      // offload bound costs this thread no parse.
      PeekInferHeader(in_bytes_, &in_);
      service_->kserve_->CountRefused(
          service_->kserve_->Find(in_.model_name(), in_.model_version()), admitted.error());
      WriteError(admitted.error());
      sink_->EndRequest(&in_bytes_);
    });
  }

  // The request read into in_bytes_: parsed, submitted, and its answers written in turn.
  void HandleRequest() {
    in_.Clear();
    if (grpc::Status read = ReadMessage(in_bytes_, &in_); !read.ok()) {
      service_->kserve_->CountRefused(nullptr, InvalidArgument(read.error_message()));
      WriteError(InvalidArgument(read.error_message()));
      sink_->EndRequest(&in_bytes_);
      return;
    }
    sink_->BeginRequest();
    auto cancel = std::make_shared<CancelSignal>();
    {
      std::lock_guard lock(mutex_);
      cancel_ = cancel;
      if (cancelled_) {
        cancel->Fire();
      }
    }
    const hookhost::HookModel* model =
        service_->kserve_->Find(in_.model_name(), in_.model_version());
    bool decoupled = model != nullptr && model->bundle != nullptr && model->manifest().decoupled;
    auto flag = in_.parameters().find("triton_enable_empty_final_response");
    bool empty_final = flag != in_.parameters().end() && flag->second.bool_param();
    Service::PartialWriter partial;
    if (decoupled) {
      partial = [sink = sink_](inference::ModelInferResponse&& r) {
        (*r.mutable_parameters())["triton_final_response"].set_bool_param(false);
        inference::ModelStreamInferResponse message;
        *message.mutable_infer_response() = std::move(r);
        grpc::ByteBuffer bytes;
        if (grpc::Status written = WriteMessage(message, &bytes); !written.ok()) {
          return Status(Internal("a response could not be serialized"));
        }
        return sink->WritePartial(std::move(bytes));
      };
    }
    // The parsed request points into `in_`, which is read into again only after this answer
    // is written. The hook host reads a request's bytes only inside Submit (hookhost.h), and
    // answers before Submit returns only a request it refused or one cancelled.
    service_->Infer(
        &context(), in_, std::move(cancel), trace_, answer_.mutable_infer_response(),
        [this, sink = sink_, decoupled, empty_final](const Status& answered) {
          // The stream stays unfinished until EndRequest (so this reactor lives until then);
          // `sink` is held because EndRequest may finish it, and OnDone delete the reactor.
          sink->CloseRequest();  // A late response of a decoupled run is dropped from here.
          if (!answered.ok()) {
            WriteError(answered.error(), empty_final);
          } else if (!decoupled || empty_final) {  // A decoupled end has no outputs.
            Write(empty_final);
          }
          sink->EndRequest(&in_bytes_);
        },
        std::move(partial));
  }

  void OnWriteDone(bool ok) override { sink_->WriteDone(ok); }

  void OnCancel() override {
    std::shared_ptr<CancelSignal> current;
    {
      std::lock_guard lock(mutex_);
      cancelled_ = true;
      current = cancel_;
    }
    sink_->Cancel();
    if (current != nullptr) {
      current->Fire();  // Outside the lock: firing may answer, and so write, inline.
    }
  }

  void OnDone() override { delete this; }

 private:
  // An error in the stream, in its request's place: its id and model, and the stream's
  // traceparent (every answer carries it, as a successful one does).
  void WriteError(const Error& error, bool final_flag = false) {
    answer_.Clear();
    answer_.set_error_message(error.ToString());
    inference::ModelInferResponse* r = answer_.mutable_infer_response();
    r->set_id(in_.id());
    r->set_model_name(in_.model_name());
    if (trace_) {
      (*r->mutable_parameters())["traceparent"].set_string_param(trace_->header);
    }
    Write(final_flag);
  }

  // Queues `answer_`, the request's last, flagged triton_final_response = true when the
  // request asked for the flag (serialized: the next request reuses answer_); a response that
  // cannot be serialized ends the stream with the reason once the request is done.
  void Write(bool final_flag = false) {
    if (final_flag) {
      (*answer_.mutable_infer_response()->mutable_parameters())["triton_final_response"]
          .set_bool_param(true);
    }
    grpc::ByteBuffer bytes;
    if (grpc::Status written = WriteMessage(answer_, &bytes); !written.ok()) {
      sink_->Finish(written);
      return;
    }
    answer_.Clear();
    sink_->WriteAnswer(std::move(bytes));
  }

  Service* service_;
  std::optional<TraceContext> trace_;  // The stream's traceparent: on every answer.
  grpc::ByteBuffer in_bytes_;
  inference::ModelInferRequest in_;  // Parsed from in_bytes_; the request in flight reads it.
  inference::ModelStreamInferResponse answer_;
  std::shared_ptr<StreamSink> sink_;  // Also held by a decoupled request's hook thread.
  std::mutex mutex_;                  // OnCancel runs on any gRPC thread.
  std::shared_ptr<CancelSignal> cancel_;
  bool cancelled_ = false;
};

void Service::Serve(CallQueue* queue, CallLane* lane, int infer_calls) {
  // A method's handler, and the shared-memory extensions' (grpc_admin.h), by name.
  auto on = [this](void (Service::*handler)(UnaryCall&)) -> UnaryCall::Handler {
    return [this, handler](UnaryCall& call) { (this->*handler)(call); };
  };
  auto shared_memory = [this](const char* name) -> UnaryCall::Handler {
    return [this, name](UnaryCall& call) { SharedMemoryMethod(kserve_, name, call); };
  };
  // `calls` of a method asked for at once, answered on the queue's thread (or on `lane`).
  auto method = [&](auto request, UnaryCall::Handler handle, bool on_lane = false, int calls = 1) {
    if (on_lane) {
      handle = OnLane(lane, std::move(handle));
    }
    methods_.push_back({[this, request](grpc::ServerContext* context, grpc::ByteBuffer* in,
                                        RawResponder* responder, grpc::CompletionQueue* call_queue,
                                        grpc::ServerCompletionQueue* arrivals, void* tag) {
                          (this->*request)(context, in, responder, call_queue, arrivals, tag);
                        },
                        std::move(handle)});
    for (int i = 0; i < calls; ++i) {
      UnaryCall::Await(&methods_.back(), queue);
    }
  };
  method(&Service::RequestModelInfer, on(&Service::OnModelInfer), false, std::max(infer_calls, 1));
  method(&Service::RequestServerLive, on(&Service::OnServerLive));
  method(&Service::RequestServerReady, on(&Service::OnServerReady));
  method(&Service::RequestModelReady, on(&Service::OnModelReady));
  method(&Service::RequestServerMetadata, on(&Service::OnServerMetadata));
  method(&Service::RequestModelMetadata, on(&Service::OnModelMetadata));
  method(&Service::RequestModelConfig, on(&Service::OnModelConfig));
  method(&Service::RequestModelStatistics, on(&Service::OnModelStatistics));
  method(&Service::RequestRepositoryIndex, on(&Service::OnRepositoryIndex));
  method(&Service::RequestRepositoryModelLoad, on(&Service::OnRepositoryModelLoad));
  method(&Service::RequestRepositoryModelUnload, on(&Service::OnRepositoryModelUnload));
  method(&Service::RequestLogSettings, on(&Service::OnLogSettings), true);
  method(&Service::RequestTraceSetting, on(&Service::OnTraceSetting), true);
  method(&Service::RequestSystemSharedMemoryStatus, shared_memory("SystemSharedMemoryStatus"),
         true);
  method(&Service::RequestSystemSharedMemoryRegister, shared_memory("SystemSharedMemoryRegister"),
         true);
  method(&Service::RequestSystemSharedMemoryUnregister,
         shared_memory("SystemSharedMemoryUnregister"), true);
  method(&Service::RequestCudaSharedMemoryStatus, shared_memory("CudaSharedMemoryStatus"));
  method(&Service::RequestCudaSharedMemoryRegister, shared_memory("CudaSharedMemoryRegister"));
  method(&Service::RequestCudaSharedMemoryUnregister, shared_memory("CudaSharedMemoryUnregister"));
  stream_requester_ = [this](grpc::ServerContext* context, RawStream* stream,
                             grpc::ServerCompletionQueue* q,
                             void* tag) { RequestModelStreamInfer(context, stream, q, q, tag); };
  auto make = [this]() -> StreamCall* { return new StreamReactor(this); };
  StreamCall::Await(make(), &stream_requester_, make, queue);
}

}  // namespace

std::unique_ptr<InferenceService> MakeInferenceService(KServeService* service) {
  // Debian builds absl with its mutex deadlock detection on: every lock gRPC takes is recorded
  // in one process-wide graph under one global lock (GraphCycles in a profile of the hook host
  // under gRPC load). A debugging aid, not a guard: off for this process (nothing of ferry's
  // own uses absl).
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return std::make_unique<Service>(service);
}

}  // namespace ferry::frontend
