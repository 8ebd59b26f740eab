// The KServe v2 infer response as JSON (and Triton's binary sections), written into one
// buffer by JsonWriter: no DOM.
#include "hookhost/frontend/json_writer.h"
#include "hookhost/frontend/kserve_codec.h"

namespace ferry::frontend {

Result<EncodedResponse> EncodeInferResponse(const std::string& model, int64_t version,
                                            const ParsedInfer& request,
                                            const hookhost::InferResponse& response) {
  std::vector<RequestedOutput> wanted = request.outputs;
  if (wanted.empty()) {
    for (const hookhost::ResponseTensor& t : response.outputs) {
      wanted.push_back({t.name, request.binary_default, std::nullopt});
    }
  }
  std::vector<const hookhost::ResponseTensor*> tensors;
  size_t data_bytes = 0;
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
    tensors.push_back(tensor);
    data_bytes += w.shm ? 0 : tensor->bytes.size();
  }
  const hookhost::RequestTimings& t = response.timings;
  JsonWriter json;
  json.Reserve(512 + data_bytes * 4);  // Up to ~16 characters per 4-byte element.
  json.BeginObject();
  if (!request.id.empty()) {
    json.Key("id").String(request.id);
  }
  json.Key("model_name").String(model);
  json.Key("model_version").String(std::to_string(version));
  json.Key("parameters").BeginObject();
  json.Key("queue_us").Int(t.queue_ns / 1000);
  json.Key("compute_us").Int(t.compute_ns / 1000);
  json.Key("preprocess_us").Int(t.preprocess_ns / 1000);
  json.Key("postprocess_us").Int(t.postprocess_ns / 1000);
  json.Key("validate_us").Int(t.validate_ns / 1000);
  json.Key("total_server_us").Int(t.total_ns / 1000);
  json.Key("batch_size").Int(t.batch_size);
  json.Key("pieces").Int(t.pieces);
  json.EndObject();
  json.Key("outputs").BeginArray();
  std::string binary;
  bool any_binary = false;
  for (size_t i = 0; i < wanted.size(); ++i) {
    const hookhost::ResponseTensor& tensor = *tensors[i];
    json.BeginObject();
    json.Key("name").String(tensor.name);
    json.Key("datatype").String(KServeName(tensor.dtype));
    json.Key("shape").BeginArray();
    for (int64_t d : tensor.shape) {
      json.Int(d);
    }
    json.EndArray();
    size_t elem = static_cast<size_t>(DTypeBits(tensor.dtype) / 8);
    any_binary = any_binary || wanted[i].binary;
    if (wanted[i].shm) {  // Written into the client's region (Submit): no data here.
      json.Key("parameters").BeginObject();
      json.Key("shared_memory_region").String(wanted[i].shm->region);
      json.Key("shared_memory_byte_size").Int(static_cast<int64_t>(tensor.bytes.size()));
      if (wanted[i].shm->offset != 0) {
        json.Key("shared_memory_offset").Int(static_cast<int64_t>(wanted[i].shm->offset));
      }
      json.EndObject();
    } else if (wanted[i].binary || elem == 0 || tensor.dtype == DType::kF16 ||
               tensor.dtype == DType::kBF16) {
      json.Key("parameters").BeginObject();
      json.Key("binary_data_size").Int(static_cast<int64_t>(tensor.bytes.size()));
      json.EndObject();
      binary.append(reinterpret_cast<const char*>(tensor.bytes.data()), tensor.bytes.size());
    } else {
      json.Key("data");
      json.Elements(tensor.dtype, tensor.bytes);
    }
    json.EndObject();
  }
  json.EndArray();
  json.EndObject();
  EncodedResponse encoded;
  encoded.body = json.Take();
  encoded.json_bytes = encoded.body.size();
  encoded.binary = !binary.empty() || any_binary;
  encoded.body += binary;
  return encoded;
}

}  // namespace ferry::frontend
