#include "hookhost/frontend/kserve_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

namespace ferry::frontend {
namespace {

using nlohmann::json;

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

nlohmann::json ServerMetadata() {
  return {{"name", "ferry"},
          {"version", "0.1.0"},
          {"extensions",
           {"binary_tensor_data", "logging", "model_configuration", "model_repository",
            "parameters", "statistics", "system_shared_memory", "trace"}}};
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
  return {{"name", manifest.name},
          {"platform", "ferry"},
          {"backend", "ferry"},
          {"max_batch_size", max_batch},
          {"input", inputs},
          {"output", outputs},
          {"model_transaction_policy", {{"decoupled", manifest.decoupled}}}};
}

Result<SharedTensor> SharedPlace(std::string_view what, std::string region,
                                 std::optional<int64_t> offset, std::optional<int64_t> byte_size,
                                 uint64_t expected) {
  if (!shm::IsRegionName(region)) {
    return InvalidArgument(std::string(what) + ": shared_memory_region is not a region's name");
  }
  if (!byte_size || *byte_size < 0 || offset.value_or(0) < 0) {
    return InvalidArgument(std::string(what) + ": shared_memory_region needs " +
                           "shared_memory_byte_size, and neither it nor shared_memory_offset " +
                           "may be negative");
  }
  if (expected > 0 && static_cast<uint64_t>(*byte_size) != expected) {
    return InvalidArgument(std::string(what) + ": shared_memory_byte_size " +
                           std::to_string(*byte_size) + " but shape and datatype make " +
                           std::to_string(expected) + " bytes");
  }
  return SharedTensor{std::move(region), static_cast<uint64_t>(offset.value_or(0)),
                      static_cast<uint64_t>(*byte_size)};
}

Result<std::vector<std::pair<const hookhost::ResponseTensor*, SharedTensor>>> SharedOutputs(
    const ParsedInfer& request, const hookhost::InferResponse& response) {
  std::vector<std::pair<const hookhost::ResponseTensor*, SharedTensor>> shared;
  for (const RequestedOutput& wanted : request.outputs) {
    if (!wanted.shm) {
      continue;
    }
    auto it =
        std::find_if(response.outputs.begin(), response.outputs.end(),
                     [&](const hookhost::ResponseTensor& t) { return t.name == wanted.name; });
    if (it == response.outputs.end()) {
      return InvalidArgument("the model has no output '" + wanted.name + "'");
    }
    shared.emplace_back(&*it, *wanted.shm);
  }
  return shared;
}

}  // namespace ferry::frontend
