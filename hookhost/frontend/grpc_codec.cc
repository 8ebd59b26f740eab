// ModelInferRequest to ParsedInfer and back to ModelInferResponse: the gRPC codec, with the
// same limits as the JSON and binary codecs.
#include <algorithm>
#include <cstring>

#include "hookhost/frontend/grpc_service.h"
#include "model/dtype.h"

namespace ferry::frontend {
namespace {

using inference::InferTensorContents;

template <typename T, typename Repeated>
void CopyTyped(const Repeated& values, std::vector<uint8_t>* out) {
  out->resize(static_cast<size_t>(values.size()) * sizeof(T));
  for (int i = 0; i < values.size(); ++i) {
    T v = static_cast<T>(values.Get(i));
    std::memcpy(out->data() + static_cast<size_t>(i) * sizeof(T), &v, sizeof(T));
  }
}

// Typed contents -> bytes of `dtype`; the number of values must match the shape. Values out of
// an integer type's range are refused, not wrapped.
Status FromContents(const InferTensorContents& c, DType dtype, size_t count,
                    std::vector<uint8_t>* out) {
  auto check_count = [&](int n) -> Status {
    if (static_cast<size_t>(n) != count) {
      return InvalidArgument("its shape holds " + std::to_string(count) +
                             " elements but its contents have " + std::to_string(n));
    }
    return OkStatus();
  };
  auto in_range = [](auto values, int64_t lo, int64_t hi) {
    for (auto v : values) {
      if (static_cast<int64_t>(v) < lo || static_cast<int64_t>(v) > hi) {
        return false;
      }
    }
    return true;
  };
  switch (dtype) {
    case DType::kBool:
      FERRY_RETURN_IF_ERROR(check_count(c.bool_contents_size()));
      CopyTyped<uint8_t>(c.bool_contents(), out);
      return OkStatus();
    case DType::kI8:
    case DType::kI16:
    case DType::kI32: {
      FERRY_RETURN_IF_ERROR(check_count(c.int_contents_size()));
      int64_t lo = dtype == DType::kI8 ? INT8_MIN : dtype == DType::kI16 ? INT16_MIN : INT32_MIN;
      int64_t hi = dtype == DType::kI8 ? INT8_MAX : dtype == DType::kI16 ? INT16_MAX : INT32_MAX;
      if (!in_range(c.int_contents(), lo, hi)) {
        return InvalidArgument("a value is out of its datatype's range");
      }
      if (dtype == DType::kI8) CopyTyped<int8_t>(c.int_contents(), out);
      if (dtype == DType::kI16) CopyTyped<int16_t>(c.int_contents(), out);
      if (dtype == DType::kI32) CopyTyped<int32_t>(c.int_contents(), out);
      return OkStatus();
    }
    case DType::kU8:
    case DType::kU16:
    case DType::kU32: {
      FERRY_RETURN_IF_ERROR(check_count(c.uint_contents_size()));
      int64_t hi = dtype == DType::kU8 ? UINT8_MAX : dtype == DType::kU16 ? UINT16_MAX : UINT32_MAX;
      if (!in_range(c.uint_contents(), 0, hi)) {
        return InvalidArgument("a value is out of its datatype's range");
      }
      if (dtype == DType::kU8) CopyTyped<uint8_t>(c.uint_contents(), out);
      if (dtype == DType::kU16) CopyTyped<uint16_t>(c.uint_contents(), out);
      if (dtype == DType::kU32) CopyTyped<uint32_t>(c.uint_contents(), out);
      return OkStatus();
    }
    case DType::kI64:
      FERRY_RETURN_IF_ERROR(check_count(c.int64_contents_size()));
      CopyTyped<int64_t>(c.int64_contents(), out);
      return OkStatus();
    case DType::kU64:
      FERRY_RETURN_IF_ERROR(check_count(c.uint64_contents_size()));
      CopyTyped<uint64_t>(c.uint64_contents(), out);
      return OkStatus();
    case DType::kF32:
      FERRY_RETURN_IF_ERROR(check_count(c.fp32_contents_size()));
      CopyTyped<float>(c.fp32_contents(), out);
      return OkStatus();
    case DType::kF64:
      FERRY_RETURN_IF_ERROR(check_count(c.fp64_contents_size()));
      CopyTyped<double>(c.fp64_contents(), out);
      return OkStatus();
    default:
      return InvalidArgument(std::string(KServeName(dtype)) +
                             " tensors must be sent as raw_input_contents");
  }
}

template <typename Map>
Result<int64_t> IntParam(const Map& params, const char* key) {
  auto it = params.find(key);
  if (it == params.end()) {
    return int64_t{0};
  }
  if (it->second.parameter_choice_case() == inference::InferParameter::kInt64Param) {
    return it->second.int64_param();
  }
  if (it->second.parameter_choice_case() == inference::InferParameter::kUint64Param &&
      it->second.uint64_param() <= static_cast<uint64_t>(INT64_MAX)) {
    return static_cast<int64_t>(it->second.uint64_param());
  }
  return InvalidArgument(std::string("parameter \"") + key + "\" must be an integer");
}

template <typename Map>
Result<std::string> StringParam(const Map& params, const char* key) {
  auto it = params.find(key);
  if (it == params.end()) {
    return std::string();
  }
  if (it->second.parameter_choice_case() != inference::InferParameter::kStringParam) {
    return InvalidArgument(std::string("parameter \"") + key + "\" must be a string");
  }
  return it->second.string_param().substr(0, kMaxTenantNameBytes);
}

// A tensor's place in a client region (nullopt: none named), as SharedPlace checks it.
template <typename Map>
Result<std::optional<SharedTensor>> GrpcPlace(const Map& params, std::string_view what,
                                              uint64_t expected) {
  if (params.find("shared_memory_region") == params.end()) {
    return std::optional<SharedTensor>();
  }
  FERRY_ASSIGN_OR_RETURN(std::string region, StringParam(params, "shared_memory_region"));
  std::optional<int64_t> offset, byte_size;
  for (auto [key, slot] : {std::pair{"shared_memory_offset", &offset},
                           std::pair{"shared_memory_byte_size", &byte_size}}) {
    if (params.find(key) != params.end()) {
      FERRY_ASSIGN_OR_RETURN(*slot, IntParam(params, key));
    }
  }
  FERRY_ASSIGN_OR_RETURN(SharedTensor place,
                         SharedPlace(what, std::move(region), offset, byte_size, expected));
  return std::optional<SharedTensor>(std::move(place));
}

// Triton's sequence_id (int64 >= 0 or uint64; "" is none, another string refused) and flags.
template <typename Map>
Status ReadSequence(const Map& params, hookhost::InferRequest* request) {
  using P = inference::InferParameter;
  for (const auto& [key, value] : params) {
    if (key == "sequence_id") {
      switch (value.parameter_choice_case()) {
        case P::kInt64Param:
          if (value.int64_param() < 0) {
            return InvalidArgument("parameter \"sequence_id\" must be >= 0");
          }
          request->sequence_id = static_cast<uint64_t>(value.int64_param());
          break;
        case P::kUint64Param:
          request->sequence_id = value.uint64_param();
          break;
        case P::kStringParam:
          if (!value.string_param().empty()) {
            return InvalidArgument(kSequenceIdText);
          }
          break;
        default:
          return InvalidArgument("parameter \"sequence_id\" must be an unsigned integer");
      }
    } else if (key == "sequence_start" || key == "sequence_end") {
      if (value.parameter_choice_case() != P::kBoolParam) {
        return InvalidArgument("parameter \"" + key + "\" must be a boolean");
      }
      (key == "sequence_start" ? request->sequence_start : request->sequence_end) =
          value.bool_param();
    }
  }
  return OkStatus();
}

bool NamesRegion(const inference::ModelInferRequest::InferInputTensor& in) {
  return in.parameters().find("shared_memory_region") != in.parameters().end();
}

// A BYTES input: KServe's serialization in raw_input_contents (checked element by element), or
// bytes_contents serialized so. `raw`: its index in raw_input_contents, or -1.
Status TakeBytes(const inference::ModelInferRequest& request, int i, int raw, uint64_t count,
                 ParsedInfer* parsed, hookhost::ClientTensor* tensor) {
  const auto& in = request.inputs(i);
  if (raw >= 0) {
    const std::string& data = request.raw_input_contents(raw);
    auto bytes =
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size());
    if (Status well_formed = CheckBytesTensor(bytes, count); !well_formed.ok()) {
      return InvalidArgument("input '" + tensor->name + "': " + well_formed.error().message);
    }
    tensor->bytes = bytes;
    return OkStatus();
  }
  const auto& strings = in.contents().bytes_contents();
  if (static_cast<uint64_t>(strings.size()) != count) {
    return InvalidArgument("input '" + tensor->name + "': shape holds " + std::to_string(count) +
                           " elements but bytes_contents has " + std::to_string(strings.size()));
  }
  std::vector<uint8_t>& storage = parsed->storage.emplace_back();
  for (const std::string& s : strings) {
    if (Status appended = AppendBytesElement(s, &storage); !appended.ok()) {
      return InvalidArgument("input '" + tensor->name + "': " + appended.error().message);
    }
  }
  tensor->bytes = storage;
  return OkStatus();
}

// Input `i` of `request` into `parsed`: its tensor, read from typed contents, from
// raw_input_contents (`raw`: the request has them; *next_raw the next one) or named in a client
// region (its bytes read later, ClientRegions::ReadInputs).
Status ParseGrpcInput(const inference::ModelInferRequest& request, int i, bool raw, int* next_raw,
                      ParsedInfer* parsed) {
  const auto& in = request.inputs(i);
  std::string name = in.name().substr(0, 256);
  std::optional<DType> dtype = DTypeFromKServe(in.datatype());
  if (!dtype) {
    return InvalidArgument("input '" + name + "': unsupported datatype '" +
                           in.datatype().substr(0, 32) + "'");
  }
  if (in.shape_size() > 16) {
    return InvalidArgument("input '" + name + "': more than 16 dims");
  }
  Shape shape(in.shape().begin(), in.shape().end());
  for (int64_t d : shape) {
    if (d < 0) {
      return InvalidArgument("input '" + name + "': shape dims must be >= 0");
    }
  }
  std::optional<uint64_t> count = ElementCount(shape);
  std::optional<uint64_t> bytes =
      *dtype == DType::kBytes ? std::optional<uint64_t>(0) : TensorByteSize(*dtype, shape);
  if (!bytes || !count || *bytes > (uint64_t{1} << 40) || *count > (uint64_t{1} << 40)) {
    return InvalidArgument("input '" + name + "': shape too large");
  }
  hookhost::ClientTensor tensor{name, *dtype, shape, {}};
  FERRY_ASSIGN_OR_RETURN(std::optional<SharedTensor> place,
                         GrpcPlace(in.parameters(), "input '" + name + "'", *bytes));
  if (place) {
    if (in.has_contents()) {
      return InvalidArgument("input '" + name + "': both contents and shared_memory_region");
    }
    parsed->shm_inputs.emplace_back(static_cast<size_t>(i), std::move(*place));
  } else if (*dtype == DType::kBytes) {
    FERRY_RETURN_IF_ERROR(TakeBytes(request, i, raw ? (*next_raw)++ : -1, *count, parsed, &tensor));
  } else if (raw) {
    if (in.has_contents()) {
      return InvalidArgument("input '" + name + "': both contents and raw_input_contents");
    }
    const std::string& data = request.raw_input_contents((*next_raw)++);
    if (data.size() != *bytes) {
      return InvalidArgument("input '" + name + "': raw_input_contents holds " +
                             std::to_string(data.size()) + " bytes but shape and datatype make " +
                             std::to_string(*bytes));
    }
    tensor.bytes =
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(data.data()), data.size());
  } else {
    size_t elem = static_cast<size_t>(DTypeBits(*dtype) / 8);
    std::vector<uint8_t>& storage = parsed->storage.emplace_back();
    Status converted = FromContents(in.contents(), *dtype, elem == 0 ? 0 : *bytes / elem, &storage);
    if (!converted.ok()) {
      return InvalidArgument("input '" + name + "': " + converted.error().message);
    }
    tensor.bytes = storage;
  }
  parsed->request.inputs.push_back(std::move(tensor));
  return OkStatus();
}

}  // namespace

Result<ParsedInfer> ParseGrpcInfer(const inference::ModelInferRequest& request) {
  ParsedInfer parsed;
  parsed.id = request.id().substr(0, 256);
  FERRY_ASSIGN_OR_RETURN(parsed.timeout_us, IntParam(request.parameters(), "timeout"));
  if (parsed.timeout_us < 0) {
    return InvalidArgument("parameter \"timeout\" must be >= 0 (microseconds)");
  }
  FERRY_ASSIGN_OR_RETURN(int64_t priority, IntParam(request.parameters(), "priority"));
  FERRY_ASSIGN_OR_RETURN(parsed.priority, PriorityFromParameter(priority));
  FERRY_ASSIGN_OR_RETURN(parsed.tenant, StringParam(request.parameters(), "tenant"));
  FERRY_RETURN_IF_ERROR(ReadSequence(request.parameters(), &parsed.request));
  int n = request.inputs_size();
  if (n < 1 || n > 64) {
    return InvalidArgument("a request needs 1 to 64 inputs, got " + std::to_string(n));
  }
  // raw_input_contents holds the inputs not read from a client region, in order.
  int shared = static_cast<int>(
      std::count_if(request.inputs().begin(), request.inputs().end(), NamesRegion));
  bool raw = request.raw_input_contents_size() > 0;
  if (raw && request.raw_input_contents_size() != n - shared) {
    return InvalidArgument("raw_input_contents has " +
                           std::to_string(request.raw_input_contents_size()) + " entries for " +
                           std::to_string(n - shared) + " inputs not in shared memory");
  }
  int next_raw = 0;
  parsed.storage.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    FERRY_RETURN_IF_ERROR(ParseGrpcInput(request, i, raw, &next_raw, &parsed));
  }
  if (request.outputs_size() > 64) {
    return InvalidArgument("a request may ask for at most 64 outputs");
  }
  for (const auto& o : request.outputs()) {
    std::string name = o.name().substr(0, 256);
    FERRY_ASSIGN_OR_RETURN(std::optional<SharedTensor> place,
                           GrpcPlace(o.parameters(), "output '" + name + "'", 0));
    parsed.outputs.push_back({std::move(name), true, std::move(place)});
  }
  return parsed;
}

Status EncodeGrpcInfer(const std::string& model, int64_t version, const ParsedInfer& request,
                       const hookhost::InferResponse& response, inference::ModelInferResponse* out,
                       bool partial) {
  out->set_model_name(model);
  out->set_model_version(std::to_string(version));
  out->set_id(request.id);
  const hookhost::RequestTimings& t = response.timings;
  auto param = [&](const char* key, int64_t v) {
    (*out->mutable_parameters())[key].set_int64_param(v);
  };
  param("queue_us", t.queue_ns / 1000);
  param("compute_us", t.compute_ns / 1000);
  param("preprocess_us", t.preprocess_ns / 1000);
  param("postprocess_us", t.postprocess_ns / 1000);
  param("validate_us", t.validate_ns / 1000);
  param("total_server_us", t.total_ns / 1000);
  param("batch_size", t.batch_size);
  param("pieces", t.pieces);
  if (!request.traceparent.empty()) {
    (*out->mutable_parameters())["traceparent"].set_string_param(request.traceparent);
  }
  std::vector<RequestedOutput> wanted = request.outputs;
  if (wanted.empty()) {
    for (const hookhost::ResponseTensor& r : response.outputs) {
      wanted.push_back({r.name, true, std::nullopt});
    }
  }
  for (const RequestedOutput& w : wanted) {
    const std::string& name = w.name;
    const hookhost::ResponseTensor* tensor = nullptr;
    for (const hookhost::ResponseTensor& r : response.outputs) {
      if (r.name == name) {
        tensor = &r;
      }
    }
    if (tensor == nullptr && partial) {
      continue;
    }
    if (tensor == nullptr) {
      return InvalidArgument("model '" + model + "' has no output '" + name + "'");
    }
    auto* o = out->add_outputs();
    o->set_name(tensor->name);
    o->set_datatype(std::string(KServeName(tensor->dtype)));
    for (int64_t d : tensor->shape) {
      o->add_shape(d);
    }
    if (w.shm) {  // Written into the client's region (Submit); an empty entry keeps the
                  // raw contents' indices those of the outputs.
      auto& params = *o->mutable_parameters();
      params["shared_memory_region"].set_string_param(w.shm->region);
      params["shared_memory_byte_size"].set_int64_param(static_cast<int64_t>(tensor->bytes.size()));
      if (w.shm->offset != 0) {
        params["shared_memory_offset"].set_int64_param(static_cast<int64_t>(w.shm->offset));
      }
      out->add_raw_output_contents();
      continue;
    }
    out->add_raw_output_contents(reinterpret_cast<const char*>(tensor->bytes.data()),
                                 tensor->bytes.size());
  }
  return OkStatus();
}

}  // namespace ferry::frontend
