#include "client/kserve_client.h"

#include <charconv>
#include <cstring>

namespace ferry::client {
namespace {

using nlohmann::json;

ErrorCode CodeForStatus(int status) {
  switch (status) {
    case 400:
      return ErrorCode::kInvalidArgument;
    case 404:
      return ErrorCode::kNotFound;
    case 429:
      return ErrorCode::kResourceExhausted;
    case 504:
      return ErrorCode::kDeadlineExceeded;
    case 503:
      return ErrorCode::kUnavailable;
    case 499:
      return ErrorCode::kCancelled;
    default:
      return ErrorCode::kInternal;
  }
}

}  // namespace

InferBody BuildInferBody(const std::vector<Tensor>& inputs, const json& parameters) {
  json doc = {{"inputs", json::array()}, {"parameters", parameters}};
  doc["parameters"]["binary_data_output"] = true;
  std::string binary;
  for (const Tensor& t : inputs) {
    doc["inputs"].push_back({{"name", t.name},
                             {"datatype", std::string(KServeName(t.dtype))},
                             {"shape", t.shape},
                             {"parameters", {{"binary_data_size", t.bytes.size()}}}});
    binary.append(reinterpret_cast<const char*>(t.bytes.data()), t.bytes.size());
  }
  InferBody out;
  out.body = doc.dump();
  out.headers = {{"Content-Type", "application/octet-stream"},
                 {"Inference-Header-Content-Length", std::to_string(out.body.size())}};
  out.body += binary;
  return out;
}

Result<InferAnswer> ReadInferAnswer(const net::HttpAnswer& answer) {
  size_t json_bytes = answer.body.size();
  if (const std::string* h = answer.Header("Inference-Header-Content-Length")) {
    auto [end, ec] = std::from_chars(h->data(), h->data() + h->size(), json_bytes);
    if (ec != std::errc() || json_bytes > answer.body.size()) {
      return Internal("Inference-Header-Content-Length '" + *h + "' is not within the body");
    }
  }
  std::string_view text(answer.body.data(), json_bytes);
  json doc = json::parse(text.begin(), text.end(), nullptr, false);
  if (answer.status != 200) {
    std::string message =
        doc.is_object() && doc.contains("error") && doc["error"].is_string()
            ? doc["error"].get<std::string>()
            : "HTTP " + std::to_string(answer.status) + ": " + answer.body.substr(0, 200);
    return Error{CodeForStatus(answer.status), message};
  }
  if (doc.is_discarded() || !doc.is_object() || !doc.contains("outputs") ||
      !doc["outputs"].is_array()) {
    return Internal("the answer is not a KServe v2 infer response");
  }
  InferAnswer out;
  out.parameters = doc.value("parameters", json::object());
  size_t offset = json_bytes;
  for (const json& o : doc["outputs"]) {
    Tensor t;
    if (!o.is_object() || !o.contains("name") || !o["name"].is_string() ||
        !o.contains("datatype") || !o["datatype"].is_string() || !o.contains("shape") ||
        !o["shape"].is_array()) {
      return Internal("an output lacks its name, datatype or shape");
    }
    t.name = o["name"].get<std::string>();
    std::optional<DType> dtype = DTypeFromKServe(o["datatype"].get<std::string>());
    if (!dtype) {
      return Internal("output '" + t.name + "': unknown datatype");
    }
    t.dtype = *dtype;
    for (const json& d : o["shape"]) {
      if (!d.is_number_integer()) {
        return Internal("output '" + t.name + "': bad shape");
      }
      t.shape.push_back(d.get<int64_t>());
    }
    std::optional<uint64_t> bytes = TensorByteSize(t.dtype, t.shape);
    if (!bytes) {
      return Internal("output '" + t.name + "': bad shape");
    }
    if (o.contains("parameters") && o["parameters"].contains("binary_data_size")) {
      if (answer.body.size() - offset < *bytes) {
        return Internal("output '" + t.name + "': the binary section is truncated");
      }
      t.bytes.assign(answer.body.begin() + static_cast<std::ptrdiff_t>(offset),
                     answer.body.begin() + static_cast<std::ptrdiff_t>(offset + *bytes));
      offset += *bytes;
    } else if (o.contains("data") && o["data"].is_array() && t.dtype == DType::kF32) {
      for (const json& v : o["data"]) {
        float f = v.is_number() ? v.get<float>() : 0.0f;
        uint8_t b[4];
        std::memcpy(b, &f, 4);
        t.bytes.insert(t.bytes.end(), b, b + 4);
      }
    } else {
      return Internal("output '" + t.name + "': neither binary nor FP32 JSON data");
    }
    out.outputs.push_back(std::move(t));
  }
  return out;
}

}  // namespace ferry::client
