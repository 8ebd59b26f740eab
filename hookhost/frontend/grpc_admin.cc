#include "hookhost/frontend/grpc_admin.h"

#include <nlohmann/json.hpp>

#include "hookhost/frontend/grpc_messages.h"
#include "hookhost/frontend/proto/inference.grpc.pb.h"

namespace ferry::frontend {

namespace {

inference::DataType ConfigType(DType dtype) {
  std::string name = "TYPE_" + std::string(KServeName(dtype));
  inference::DataType t = inference::TYPE_INVALID;
  inference::DataType_Parse(name, &t);
  return t;
}

// A LogSettings request's settings as the JSON object the HTTP endpoint takes.
nlohmann::json SettingsJson(const inference::LogSettingsRequest& in) {
  nlohmann::json changes = nlohmann::json::object();
  for (const auto& [key, value] : in.settings()) {
    switch (value.parameter_choice_case()) {
      case inference::LogSettingsRequest::SettingValue::kBoolParam:
        changes[key] = value.bool_param();
        break;
      case inference::LogSettingsRequest::SettingValue::kUint32Param:
        changes[key] = value.uint32_param();
        break;
      case inference::LogSettingsRequest::SettingValue::kStringParam:
        changes[key] = value.string_param();
        break;
      default:
        changes[key] = nullptr;  // No value: refused as the wrong type.
    }
  }
  return changes;
}

// A load's or unload's parameters as the JSON object HTTP's body carries.
template <typename Map>
nlohmann::json ParametersJson(const Map& parameters) {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [key, value] : parameters) {
    switch (value.parameter_choice_case()) {
      case inference::ModelRepositoryParameter::kBoolParam:
        out[key] = value.bool_param();
        break;
      case inference::ModelRepositoryParameter::kInt64Param:
        out[key] = value.int64_param();
        break;
      case inference::ModelRepositoryParameter::kStringParam:
        out[key] = value.string_param();
        break;
      default:
        out[key] = nullptr;  // Bytes (a file's) or nothing: refused by its key or type.
    }
  }
  return out;
}

// The model and parameters of a load or an unload request.
template <typename Request>
grpc::Status ReadChange(const grpc::ByteBuffer& in, std::string* model,
                        nlohmann::json* parameters) {
  Request request;
  grpc::Status status = ReadMessage(in, &request);
  if (status.ok()) {
    *model = request.model_name();
    *parameters = ParametersJson(request.parameters());
  }
  return status;
}

}  // namespace

Result<uint32_t> AuthorizeCall(const KServeService* kserve, const grpc::ServerContextBase& call,
                               Endpoint endpoint, std::string_view model) {
  if (kserve == nullptr) {
    return uint32_t{0};
  }
  const auto& metadata = call.client_metadata();
  std::string subject = kserve->PeerSubject(call.peer());
  auto it = metadata.find("authorization");
  if (it == metadata.end()) {
    return kserve->Authorize(nullptr, subject, endpoint, model);
  }
  std::string value(it->second.data(), it->second.size());
  return kserve->Authorize(&value, subject, endpoint, model);
}

void LogSettingsMethod(KServeService* kserve, UnaryCall& call) {
  ReplyInline<inference::LogSettingsRequest, inference::LogSettingsResponse>(
      call,
      [&](const inference::LogSettingsRequest* request,
          inference::LogSettingsResponse* response) -> grpc::Status {
        Endpoint endpoint = request->settings().empty() ? Endpoint::kMetadata : Endpoint::kAdmin;
        if (Result<uint32_t> t = AuthorizeCall(kserve, call.context(), endpoint, {}); !t.ok()) {
          return ToGrpc(t.error());
        }
        Result<nlohmann::json> settings = kserve->LogSettingsCall(SettingsJson(*request));
        if (!settings.ok()) {
          return ToGrpc(settings.error());
        }
        for (const auto& [key, value] : settings->items()) {
          auto& v = (*response->mutable_settings())[key];
          if (value.is_boolean()) {
            v.set_bool_param(value.get<bool>());
          } else if (value.is_number_unsigned()) {
            v.set_uint32_param(value.get<uint32_t>());
          } else {
            v.set_string_param(value.get<std::string>());
          }
        }
        return grpc::Status::OK;
      });
}

void TraceSettingMethod(KServeService* kserve, UnaryCall& call) {
  ReplyInline<inference::TraceSettingRequest, inference::TraceSettingResponse>(
      call,
      [&](const inference::TraceSettingRequest* request,
          inference::TraceSettingResponse* response) -> grpc::Status {
        Endpoint endpoint = request->settings().empty() ? Endpoint::kMetadata : Endpoint::kAdmin;
        // A model's settings are read as its metadata is: only by who may see the model.
        if (Result<uint32_t> t =
                AuthorizeCall(kserve, call.context(), endpoint, request->model_name());
            !t.ok()) {
          return ToGrpc(t.error());
        }
        if (kserve == nullptr) {
          return {grpc::StatusCode::UNIMPLEMENTED, "no trace settings here"};
        }
        if (!request->model_name().empty() && kserve->Find(request->model_name()) == nullptr) {
          return {grpc::StatusCode::NOT_FOUND,
                  "unknown model '" + request->model_name().substr(0, 128) + "'"};
        }
        if (!request->model_name().empty() && !request->settings().empty()) {
          return {grpc::StatusCode::INVALID_ARGUMENT,
                  "trace settings are the node's, for every model: send them without a model"};
        }
        // Triton's values: none resets a key, one is the value, trace_level may list more.
        nlohmann::json changes = nlohmann::json::object();
        for (const auto& [key, value] : request->settings()) {
          if (value.value_size() == 0) {
            changes[key] = nullptr;
          } else if (value.value_size() == 1) {
            changes[key] = value.value(0);
          } else {
            changes[key] = std::vector<std::string>(value.value().begin(), value.value().end());
          }
        }
        Result<nlohmann::json> settings = kserve->TraceSettingsCall(changes);
        if (!settings.ok()) {
          return ToGrpc(settings.error());
        }
        for (const auto& [key, value] : settings->items()) {
          auto& v = (*response->mutable_settings())[key];
          for (const auto& item : value.is_array() ? value : nlohmann::json::array({value})) {
            v.add_value(item.get<std::string>());
          }
        }
        return grpc::Status::OK;
      });
}

void RepositoryChangeMethod(KServeService* kserve, shm::RepositoryOp op, UnaryCall& call) {
  Result<uint32_t> tenant = AuthorizeCall(kserve, call.context(), Endpoint::kAdmin, {});
  if (!tenant.ok()) {  // Before the message is read: who asks comes first.
    call.Finish(ToGrpc(tenant.error()));
    return;
  }
  std::string model;
  nlohmann::json parameters;
  grpc::Status read = op == shm::RepositoryOp::kLoad
                          ? ReadChange<inference::RepositoryModelLoadRequest>(call.request_bytes(),
                                                                              &model, &parameters)
                          : ReadChange<inference::RepositoryModelUnloadRequest>(
                                call.request_bytes(), &model, &parameters);
  if (!read.ok()) {
    call.Finish(read);
    return;
  }
  Result<int64_t> cap = KServeService::LoadParameters(op, model, parameters);
  if (!cap.ok() || kserve == nullptr) {
    call.Finish(cap.ok() ? grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "no repository")
                         : ToGrpc(cap.error()));
    return;
  }
  // The call lives until it is finished.
  kserve->RepositoryChange(op, model, *cap, [&call, op](const Status& status) {
    grpc::Status answer =
        !status.ok() ? ToGrpc(status.error())
        : op == shm::RepositoryOp::kLoad
            ? WriteMessage(inference::RepositoryModelLoadResponse(), call.response_bytes())
            : WriteMessage(inference::RepositoryModelUnloadResponse(), call.response_bytes());
    call.Finish(answer);
  });
}

namespace {

// A method of the system shared-memory extension: `body` with the caller's tenant and the
// hook host's region client.
template <typename Request, typename Response, typename Body>
void SystemMethod(KServeService* kserve, UnaryCall& call, Body body) {
  ReplyInline<Request,
              Response>(call, [&](const Request* request, Response* response) -> grpc::Status {
    Result<uint32_t> tenant = AuthorizeCall(kserve, call.context(), Endpoint::kInfer, {});
    if (!tenant.ok()) {
      return ToGrpc(tenant.error());
    }
    ClientRegions* regions = kserve == nullptr ? nullptr : kserve->regions();
    if (regions == nullptr) {
      return {grpc::StatusCode::UNAVAILABLE, "system shared memory is not served by this process"};
    }
    Status done = body(*regions, *request, *response, *tenant);
    return done.ok() ? grpc::Status::OK : ToGrpc(done.error());
  });
}

template <typename Request, typename Response>
void CudaMethod(KServeService* kserve, UnaryCall& call, bool refuse) {
  ReplyInline<Request, Response>(call, [&](const Request*, Response*) -> grpc::Status {
    if (Result<uint32_t> t = AuthorizeCall(kserve, call.context(), Endpoint::kInfer, {}); !t.ok()) {
      return ToGrpc(t.error());
    }
    return refuse ? grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, kCudaSharedMemoryRefusal)
                  : grpc::Status::OK;
  });
}

}  // namespace

void SharedMemoryMethod(KServeService* kserve, std::string_view method, UnaryCall& call) {
  using namespace inference;  // NOLINT: Triton's message names, one per line below.
  if (method == "SystemSharedMemoryStatus") {
    return SystemMethod<SystemSharedMemoryStatusRequest, SystemSharedMemoryStatusResponse>(
        kserve, call,
        [](ClientRegions& regions, const SystemSharedMemoryStatusRequest& request,
           SystemSharedMemoryStatusResponse& response, uint32_t tenant) -> Status {
          FERRY_ASSIGN_OR_RETURN(std::vector<RegionStatus> status,
                                 regions.Describe(request.name(), tenant));
          for (const RegionStatus& r : status) {
            auto& entry = (*response.mutable_regions())[r.name];
            entry.set_name(r.name);
            entry.set_key(r.key);
            entry.set_offset(r.offset);
            entry.set_byte_size(r.byte_size);
          }
          return OkStatus();
        });
  }
  if (method == "SystemSharedMemoryRegister") {
    return SystemMethod<SystemSharedMemoryRegisterRequest, SystemSharedMemoryRegisterResponse>(
        kserve, call,
        [](ClientRegions& regions, const SystemSharedMemoryRegisterRequest& request,
           SystemSharedMemoryRegisterResponse&, uint32_t tenant) {
          return regions.Register(request.name(), request.key(), request.offset(),
                                  request.byte_size(), tenant);
        });
  }
  if (method == "SystemSharedMemoryUnregister") {
    return SystemMethod<SystemSharedMemoryUnregisterRequest, SystemSharedMemoryUnregisterResponse>(
        kserve, call,
        [](ClientRegions& regions, const SystemSharedMemoryUnregisterRequest& request,
           SystemSharedMemoryUnregisterResponse&,
           uint32_t tenant) { return regions.Unregister(request.name(), tenant); });
  }
  if (method == "CudaSharedMemoryStatus") {
    return CudaMethod<CudaSharedMemoryStatusRequest, CudaSharedMemoryStatusResponse>(kserve, call,
                                                                                     false);
  }
  if (method == "CudaSharedMemoryRegister") {
    return CudaMethod<CudaSharedMemoryRegisterRequest, CudaSharedMemoryRegisterResponse>(
        kserve, call, true);
  }
  return CudaMethod<CudaSharedMemoryUnregisterRequest, CudaSharedMemoryUnregisterResponse>(
      kserve, call, false);
}

void DescribeModel(const KServeService& kserve, const Manifest& m,
                   inference::ModelMetadataResponse* out) {
  out->set_name(m.name);
  for (const std::string& v : kserve.Versions(m.name)) {
    out->add_versions(v);
  }
  out->set_platform("ferry");
  auto describe = [](const TensorSpec& t, auto* x) {  // An input or an output alike.
    x->set_name(t.name);
    x->set_datatype(std::string(KServeName(t.dtype)));
    for (int64_t d : t.shape) x->add_shape(d);
  };
  for (const TensorSpec& t : m.client_inputs()) describe(t, out->add_inputs());
  for (const TensorSpec& t : m.client_outputs()) describe(t, out->add_outputs());
}

void DescribeConfig(const Manifest& m, inference::ModelConfig* out) {
  int64_t max_batch = MaxBatchSize(m);
  out->set_name(m.name);
  out->set_platform("ferry");
  out->set_backend("ferry");
  out->set_max_batch_size(static_cast<int32_t>(max_batch));
  out->mutable_model_transaction_policy()->set_decoupled(m.decoupled);
  auto describe = [max_batch](const TensorSpec& t, auto* x) {  // Dims without the batch.
    x->set_name(t.name);
    x->set_data_type(ConfigType(t.dtype));
    for (size_t i = max_batch > 0 ? 1 : 0; i < t.shape.size(); ++i) x->add_dims(t.shape[i]);
  };
  for (const TensorSpec& t : m.client_inputs()) describe(t, out->add_input());
  for (const TensorSpec& t : m.client_outputs()) describe(t, out->add_output());
}

}  // namespace ferry::frontend
