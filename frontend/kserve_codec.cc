#include "frontend/kserve_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace ferry::frontend {
namespace {

using nlohmann::json;

// Elements flattened from nested JSON arrays (row-major). The nesting was bounded before.
Status Flatten(const json& value, std::vector<const json*>* out, size_t limit) {
  if (value.is_array()) {
    for (const json& v : value) {
      FERRY_RETURN_IF_ERROR(Flatten(v, out, limit));
    }
    return OkStatus();
  }
  if (out->size() >= limit) {
    return InvalidArgument("more elements than its shape holds");
  }
  out->push_back(&value);
  return OkStatus();
}

template <typename T>
void Put(std::vector<uint8_t>* bytes, size_t i, T v) {
  std::memcpy(bytes->data() + i * sizeof(T), &v, sizeof(T));
}

template <typename T>
Status PutInteger(const json& v, std::vector<uint8_t>* bytes, size_t i) {
  if (v.is_number_unsigned()) {
    uint64_t x = v.get<uint64_t>();
    if (x > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
      return InvalidArgument("value " + std::to_string(x) + " out of range");
    }
    Put<T>(bytes, i, static_cast<T>(x));
    return OkStatus();
  }
  if (v.is_number_integer()) {
    int64_t x = v.get<int64_t>();
    if (x < static_cast<int64_t>(std::numeric_limits<T>::min()) ||
        (x > 0 &&
         static_cast<uint64_t>(x) > static_cast<uint64_t>(std::numeric_limits<T>::max()))) {
      return InvalidArgument("value " + std::to_string(x) + " out of range");
    }
    Put<T>(bytes, i, static_cast<T>(x));
    return OkStatus();
  }
  return InvalidArgument("an integer was expected");
}

Status PutElement(DType dtype, const json& v, std::vector<uint8_t>* bytes, size_t i) {
  switch (dtype) {
    case DType::kBool:
      if (!v.is_boolean()) {
        return InvalidArgument("true or false was expected");
      }
      (*bytes)[i] = v.get<bool>() ? 1 : 0;
      return OkStatus();
    case DType::kU8:
      return PutInteger<uint8_t>(v, bytes, i);
    case DType::kI8:
      return PutInteger<int8_t>(v, bytes, i);
    case DType::kU16:
      return PutInteger<uint16_t>(v, bytes, i);
    case DType::kI16:
      return PutInteger<int16_t>(v, bytes, i);
    case DType::kU32:
      return PutInteger<uint32_t>(v, bytes, i);
    case DType::kI32:
      return PutInteger<int32_t>(v, bytes, i);
    case DType::kU64:
      return PutInteger<uint64_t>(v, bytes, i);
    case DType::kI64:
      return PutInteger<int64_t>(v, bytes, i);
    case DType::kF32:
    case DType::kF64: {
      if (!v.is_number()) {
        return InvalidArgument("a number was expected");
      }
      double x = v.get<double>();
      if (dtype == DType::kF32) {
        Put<float>(bytes, i, static_cast<float>(x));
      } else {
        Put<double>(bytes, i, x);
      }
      return OkStatus();
    }
    default:
      return InvalidArgument(std::string(KServeName(dtype)) +
                             " tensors must be sent as binary data (binary_data_size)");
  }
}

json Element(DType dtype, const uint8_t* p) {
  auto get = [p](auto zero) {
    decltype(zero) v;
    std::memcpy(&v, p, sizeof(v));
    return v;
  };
  switch (dtype) {
    case DType::kBool:
      return json(*p != 0);
    case DType::kU8:
      return json(get(uint8_t{}));
    case DType::kI8:
      return json(get(int8_t{}));
    case DType::kU16:
      return json(get(uint16_t{}));
    case DType::kI16:
      return json(get(int16_t{}));
    case DType::kU32:
      return json(get(uint32_t{}));
    case DType::kI32:
      return json(get(int32_t{}));
    case DType::kU64:
      return json(get(uint64_t{}));
    case DType::kI64:
      return json(get(int64_t{}));
    case DType::kF32: {
      float f = get(float{});
      return std::isfinite(f) ? json(f) : json(nullptr);
    }
    case DType::kF64: {
      double d = get(double{});
      return std::isfinite(d) ? json(d) : json(nullptr);
    }
    default:
      return json(nullptr);
  }
}

Result<Shape> ReadShape(const json& tensor, const std::string& name) {
  auto shape = tensor.find("shape");
  if (shape == tensor.end() || !shape->is_array() || shape->size() > 16) {
    return InvalidArgument("input '" + name + "': \"shape\" must be an array of at most 16 dims");
  }
  Shape out;
  for (const json& d : *shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) {
      return InvalidArgument("input '" + name + "': shape dims must be integers >= 0");
    }
    out.push_back(d.get<int64_t>());
  }
  return out;
}

// A parameter's boolean value, false when absent; INVALID_ARGUMENT when mistyped.
Result<bool> BoolParameter(const json& object, const char* key) {
  auto params = object.find("parameters");
  if (params == object.end()) {
    return false;
  }
  if (!params->is_object()) {
    return InvalidArgument("\"parameters\" must be an object");
  }
  auto it = params->find(key);
  if (it == params->end()) {
    return false;
  }
  if (!it->is_boolean()) {
    return InvalidArgument(std::string("parameter \"") + key + "\" must be a boolean");
  }
  return it->get<bool>();
}

// A parameter's string value, "" when absent; INVALID_ARGUMENT when mistyped.
Result<std::string> StringParameter(const json& object, const char* key) {
  auto params = object.find("parameters");
  if (params == object.end() || !params->is_object()) {
    return std::string();
  }
  auto it = params->find(key);
  if (it == params->end()) {
    return std::string();
  }
  if (!it->is_string()) {
    return InvalidArgument(std::string("parameter \"") + key + "\" must be a string");
  }
  return it->get<std::string>().substr(0, kMaxTenantNameBytes);
}

Result<int64_t> IntParameter(const json& object, const char* key, int64_t absent) {
  auto params = object.find("parameters");
  if (params == object.end() || !params->is_object()) {
    return absent;
  }
  auto it = params->find(key);
  if (it == params->end()) {
    return absent;
  }
  if (!it->is_number_integer()) {
    return InvalidArgument(std::string("parameter \"") + key + "\" must be an integer");
  }
  return it->get<int64_t>();
}

json TensorMetadata(const TensorSpec& spec) {
  return {{"name", spec.name},
          {"datatype", std::string(KServeName(spec.dtype))},
          {"shape", spec.shape}};
}

json TensorConfig(const TensorSpec& spec, bool drop_batch) {
  Shape dims = spec.shape;
  if (drop_batch && !dims.empty()) {
    dims.erase(dims.begin());
  }
  return {{"name", spec.name},
          {"data_type", "TYPE_" + std::string(KServeName(spec.dtype))},
          {"dims", dims}};
}

}  // namespace

bool JsonDepthWithin(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return false;
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

std::optional<TraceContext> ParseTraceparent(std::string_view header) {
  auto lower_hex = [&](size_t from, size_t count, uint64_t* value) {
    uint64_t v = 0;
    for (size_t i = from; i < from + count; ++i) {
      char c = header[i];
      bool digit = c >= '0' && c <= '9';
      if (!digit && !(c >= 'a' && c <= 'f')) {
        return false;
      }
      v = (v << 4) | static_cast<uint64_t>(digit ? c - '0' : c - 'a' + 10);
    }
    *value = v;
    return true;
  };
  uint64_t version = 0, high = 0, low = 0, parent = 0, flags = 0;
  bool valid = header.size() >= 55 && header[2] == '-' && header[35] == '-' && header[52] == '-' &&
               lower_hex(0, 2, &version) && lower_hex(3, 16, &high) && lower_hex(19, 16, &low) &&
               lower_hex(36, 16, &parent) && lower_hex(53, 2, &flags) && version != 0xff &&
               (high | low) != 0 && parent != 0 &&
               (version == 0 ? header.size() == 55 : header.size() == 55 || header[55] == '-');
  if (!valid) {
    return std::nullopt;
  }
  return TraceContext{high, low, "00" + std::string(header.substr(2, 53))};
}

void ApplyTrace(const std::optional<TraceContext>& trace, ParsedInfer& parsed) {
  if (trace) {
    parsed.request.trace_id_high = trace->trace_id_high;
    parsed.request.trace_id_low = trace->trace_id_low;
    parsed.traceparent = trace->header;
  }
}

Status MergeTenant(ParsedInfer& parsed, std::string_view named, std::string_view where) {
  std::string_view name = named.substr(0, kMaxTenantNameBytes);
  if (!parsed.tenant.empty() && parsed.tenant != name) {
    return InvalidArgument("the " + std::string(where) +
                           " and the \"tenant\" parameter name different tenants");
  }
  parsed.tenant = std::string(name);
  return OkStatus();
}

Result<ParsedInfer> ParseInferRequest(std::string_view header, std::string_view binary) {
  if (!JsonDepthWithin(header, kMaxJsonDepth)) {
    return InvalidArgument("request JSON nested deeper than " + std::to_string(kMaxJsonDepth));
  }
  json doc = json::parse(header.begin(), header.end(), nullptr, false);
  if (doc.is_discarded() || !doc.is_object()) {
    return InvalidArgument("the request body is not a JSON object");
  }
  ParsedInfer parsed;
  if (auto id = doc.find("id"); id != doc.end()) {
    if (!id->is_string()) {
      return InvalidArgument("\"id\" must be a string");
    }
    parsed.id = id->get<std::string>().substr(0, 256);
  }
  FERRY_ASSIGN_OR_RETURN(parsed.binary_default, BoolParameter(doc, "binary_data_output"));
  FERRY_ASSIGN_OR_RETURN(parsed.timeout_us, IntParameter(doc, "timeout", 0));
  if (parsed.timeout_us < 0) {
    return InvalidArgument("parameter \"timeout\" must be >= 0 (microseconds)");
  }
  FERRY_ASSIGN_OR_RETURN(parsed.priority, IntParameter(doc, "priority", 0));
  FERRY_ASSIGN_OR_RETURN(parsed.tenant, StringParameter(doc, "tenant"));
  auto inputs = doc.find("inputs");
  if (inputs == doc.end() || !inputs->is_array() || inputs->empty() || inputs->size() > 64) {
    return InvalidArgument("\"inputs\" must be an array of 1 to 64 tensors");
  }
  // Reserved first: spans into `storage` must not move.
  parsed.storage.reserve(inputs->size());
  size_t offset = 0;
  for (const json& tensor : *inputs) {
    if (!tensor.is_object() || !tensor.contains("name") || !tensor["name"].is_string()) {
      return InvalidArgument("each input needs a string \"name\"");
    }
    std::string name = tensor["name"].get<std::string>().substr(0, 256);
    if (!tensor.contains("datatype") || !tensor["datatype"].is_string()) {
      return InvalidArgument("input '" + name + "': \"datatype\" must be a string");
    }
    std::string type = tensor["datatype"].get<std::string>();
    std::optional<DType> dtype = DTypeFromKServe(type);
    if (!dtype) {
      return InvalidArgument("input '" + name + "': unsupported datatype '" + type.substr(0, 32) +
                             "'");
    }
    FERRY_ASSIGN_OR_RETURN(Shape shape, ReadShape(tensor, name));
    std::optional<uint64_t> bytes = TensorByteSize(*dtype, shape);
    if (!bytes || *bytes > (uint64_t{1} << 40)) {
      return InvalidArgument("input '" + name + "': shape too large");
    }
    hookhost::ClientTensor client{name, *dtype, shape, {}};
    FERRY_ASSIGN_OR_RETURN(int64_t binary_size, IntParameter(tensor, "binary_data_size", -1));
    if (binary_size >= 0) {
      if (tensor.contains("data")) {
        return InvalidArgument("input '" + name + "': both \"data\" and binary_data_size");
      }
      if (static_cast<uint64_t>(binary_size) != *bytes) {
        return InvalidArgument("input '" + name + "': binary_data_size " +
                               std::to_string(binary_size) + " but shape and datatype make " +
                               std::to_string(*bytes) + " bytes");
      }
      if (binary.size() - offset < *bytes) {
        return InvalidArgument("input '" + name + "': the binary section is truncated (" +
                               std::to_string(binary.size() - offset) + " bytes left, " +
                               std::to_string(*bytes) + " expected)");
      }
      client.bytes = std::span<const uint8_t>(
          reinterpret_cast<const uint8_t*>(binary.data()) + offset, *bytes);
      offset += *bytes;
    } else {
      auto data = tensor.find("data");
      if (data == tensor.end()) {
        return InvalidArgument("input '" + name + "': no \"data\" and no binary_data_size");
      }
      size_t elem = static_cast<size_t>(DTypeBits(*dtype) / 8);
      size_t count = elem == 0 ? 0 : *bytes / elem;
      std::vector<const json*> elements;
      Status flat = Flatten(*data, &elements, count);
      if (!flat.ok() || elements.size() != count) {
        return InvalidArgument("input '" + name + "': shape holds " + std::to_string(count) +
                               " elements but \"data\" has " +
                               (flat.ok() ? std::to_string(elements.size()) : "more"));
      }
      std::vector<uint8_t>& storage = parsed.storage.emplace_back(*bytes);
      for (size_t i = 0; i < count; ++i) {
        Status put = PutElement(*dtype, *elements[i], &storage, i);
        if (!put.ok()) {
          return InvalidArgument("input '" + name + "' element " + std::to_string(i) + ": " +
                                 put.error().message);
        }
      }
      client.bytes = storage;
    }
    parsed.request.inputs.push_back(std::move(client));
  }
  if (offset != binary.size()) {
    return InvalidArgument("the binary section holds " + std::to_string(binary.size()) +
                           " bytes but the inputs use " + std::to_string(offset));
  }
  if (auto outputs = doc.find("outputs"); outputs != doc.end()) {
    if (!outputs->is_array() || outputs->size() > 64) {
      return InvalidArgument("\"outputs\" must be an array of at most 64");
    }
    for (const json& o : *outputs) {
      if (!o.is_object() || !o.contains("name") || !o["name"].is_string()) {
        return InvalidArgument("each requested output needs a string \"name\"");
      }
      RequestedOutput r{o["name"].get<std::string>().substr(0, 256), parsed.binary_default};
      auto params = o.find("parameters");
      if (params != o.end() && params->is_object() && params->contains("binary_data")) {
        FERRY_ASSIGN_OR_RETURN(r.binary, BoolParameter(o, "binary_data"));
      }
      parsed.outputs.push_back(std::move(r));
    }
  }
  return parsed;
}

Result<ParsedInfer> ParseRawInferRequest(const Manifest& manifest, std::string_view body) {
  const std::vector<TensorSpec>& inputs = manifest.client_inputs();
  if (inputs.size() != 1) {
    return InvalidArgument(
        "a raw binary request (Inference-Header-Content-Length: 0) needs a "
        "model with one input; '" +
        manifest.name + "' has " + std::to_string(inputs.size()));
  }
  ParsedInfer parsed;
  parsed.binary_default = true;
  Shape shape = inputs[0].batch_axis ? inputs[0].At(1) : inputs[0].shape;
  parsed.request.inputs.push_back(
      {inputs[0].name, inputs[0].dtype, shape,
       std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(body.data()), body.size())});
  return parsed;
}

Result<EncodedResponse> EncodeInferResponse(const std::string& model, int64_t version,
                                            const ParsedInfer& request,
                                            const hookhost::InferResponse& response) {
  std::vector<RequestedOutput> wanted = request.outputs;
  if (wanted.empty()) {
    for (const hookhost::ResponseTensor& t : response.outputs) {
      wanted.push_back({t.name, request.binary_default});
    }
  }
  const hookhost::RequestTimings& t = response.timings;
  json doc = {{"model_name", model},
              {"model_version", std::to_string(version)},
              {"parameters",
               {{"queue_us", t.queue_ns / 1000},
                {"compute_us", t.compute_ns / 1000},
                {"preprocess_us", t.preprocess_ns / 1000},
                {"postprocess_us", t.postprocess_ns / 1000},
                {"validate_us", t.validate_ns / 1000},
                {"total_server_us", t.total_ns / 1000},
                {"batch_size", t.batch_size},
                {"pieces", t.pieces}}}};
  if (!request.id.empty()) {
    doc["id"] = request.id;
  }
  json outputs = json::array();
  std::string binary;
  for (const RequestedOutput& w : wanted) {
    const hookhost::ResponseTensor* tensor = nullptr;
    for (const hookhost::ResponseTensor& r : response.outputs) {
      if (r.name == w.name) {
        tensor = &r;
      }
    }
    if (tensor == nullptr) {
      return InvalidArgument("model '" + model + "' has no output '" + w.name + "'");
    }
    json out = {{"name", tensor->name},
                {"datatype", std::string(KServeName(tensor->dtype))},
                {"shape", tensor->shape}};
    size_t elem = static_cast<size_t>(DTypeBits(tensor->dtype) / 8);
    bool binary_out =
        w.binary || elem == 0 || tensor->dtype == DType::kF16 || tensor->dtype == DType::kBF16;
    if (binary_out) {
      out["parameters"] = {{"binary_data_size", tensor->bytes.size()}};
      binary.append(reinterpret_cast<const char*>(tensor->bytes.data()), tensor->bytes.size());
    } else {
      json data = json::array();
      for (size_t i = 0; i + elem <= tensor->bytes.size(); i += elem) {
        data.push_back(Element(tensor->dtype, tensor->bytes.data() + i));
      }
      out["data"] = std::move(data);
    }
    outputs.push_back(std::move(out));
  }
  doc["outputs"] = std::move(outputs);
  EncodedResponse encoded;
  encoded.body = doc.dump(-1, ' ', false, json::error_handler_t::replace);
  encoded.json_bytes = encoded.body.size();
  encoded.binary =
      !binary.empty() ||
      std::any_of(wanted.begin(), wanted.end(), [](const RequestedOutput& w) { return w.binary; });
  encoded.body += binary;
  return encoded;
}

nlohmann::json ServerMetadata() {
  return {{"name", "ferry"},
          {"version", "0.1.0"},
          {"extensions", {"binary_tensor_data", "model_configuration", "parameters"}}};
}

int64_t MaxBatchSize(const Manifest& manifest) {
  if (manifest.unbatched() || manifest.batch_sizes.empty()) {  // Empty: a pipeline.
    return 0;
  }
  for (const std::vector<TensorSpec>* list :
       {&manifest.client_inputs(), &manifest.client_outputs()}) {
    for (const TensorSpec& t : *list) {
      if (!t.batch_axis || *t.batch_axis != 0) {
        return 0;
      }
    }
  }
  return manifest.batch_sizes.back();
}

nlohmann::json ModelMetadata(const Manifest& manifest) {
  json inputs = json::array();
  json outputs = json::array();
  for (const TensorSpec& t : manifest.client_inputs()) {
    inputs.push_back(TensorMetadata(t));
  }
  for (const TensorSpec& t : manifest.client_outputs()) {
    outputs.push_back(TensorMetadata(t));
  }
  return {{"name", manifest.name},
          {"versions", {std::to_string(manifest.version)}},
          {"platform", "ferry"},
          {"inputs", inputs},
          {"outputs", outputs}};
}

nlohmann::json ModelConfig(const Manifest& manifest) {
  int64_t max_batch = MaxBatchSize(manifest);
  json inputs = json::array();
  json outputs = json::array();
  for (const TensorSpec& t : manifest.client_inputs()) {
    inputs.push_back(TensorConfig(t, max_batch > 0));
  }
  for (const TensorSpec& t : manifest.client_outputs()) {
    outputs.push_back(TensorConfig(t, max_batch > 0));
  }
  return {{"name", manifest.name},       {"platform", "ferry"}, {"backend", "ferry"},
          {"max_batch_size", max_batch}, {"input", inputs},     {"output", outputs}};
}

}  // namespace ferry::frontend
