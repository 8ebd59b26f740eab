// KServe v2 (Open Inference Protocol) over HTTP, as JSON and with Triton's binary tensor
// extension: the request and response bodies, and the metadata and config documents. Pure
// functions over bytes; the routing and the hook host are kserve_service.h.
//
// Everything a client sends is hostile: the infer body is read with simdjson's On-Demand API
// (infer_request_json.cc), which validates UTF-8 and the structure of what it reads and skips what
// it does not read without recursing; "data" may nest at most kMaxJsonDepth arrays; element counts
// must match shapes whose byte sizes cannot overflow and that the text could hold (nothing is
// allocated for a shape that lies); binary sections must add up exactly; every value must fit its
// datatype (FP32 included: 1e39 is refused, not made infinite).
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "hookhost/frontend/client_regions.h"
#include "hookhost/hookhost.h"
#include "model/manifest.h"

namespace ferry::frontend {

inline constexpr int kMaxJsonDepth = 32;

// True when no point of `text` is nested deeper than `max_depth` arrays and objects
// (brackets inside strings do not count).
bool JsonDepthWithin(std::string_view text, int max_depth);

struct RequestedOutput {
  std::string name;
  bool binary = false;
  std::optional<SharedTensor> shm;  // Written into a client region (client_regions.h).
};

// A parsed infer request. `request.inputs[i].bytes` point into `storage` or into the
// binary section given to ParseInferRequest, which must outlive the submission.
struct ParsedInfer {
  std::string id;
  hookhost::InferRequest request;
  std::vector<std::vector<uint8_t>> storage;
  // Inputs read from client regions (shared_memory_region): their index in request.inputs
  // (whose bytes are empty until ClientRegions::ReadInputs) and place, the size checked
  // against the tensor's own (BYTES: its serialization's, checked when read).
  std::vector<std::pair<size_t, SharedTensor>> shm_inputs;
  std::vector<RequestedOutput> outputs;  // Empty: every output, JSON unless binary_default.
  bool binary_default = false;           // "binary_data_output".
  int64_t timeout_us = 0;                // "timeout" parameter: 0 = none.
  Priority priority = kDefaultPriority;  // The "priority" parameter (PriorityFromParameter).
  std::string tenant;                    // "tenant" parameter (or header): "" = none.
  // The caller's tenant as authenticated (its API key or certificate; 0: anonymous), set by
  // KServeService::ApplyKeyTenant: whose client regions the request may use. Never the
  // tenant a request merely names.
  uint32_t caller_tenant = 0;
  std::string traceparent;  // Echoed on the answer (TraceContext): "" = none.
};

// Triton also takes a string sequence_id (a model's CONTROL_SEQUENCE_CORRID of type
// TYPE_STRING); ferry keys sequences by a 64-bit integer and refuses a string one by name.
inline constexpr const char* kSequenceIdText =
    "parameter \"sequence_id\": this node takes unsigned integer sequence ids, not strings";

// A tenant name is kept to this many bytes (it only has to match a declared one).
inline constexpr size_t kMaxTenantNameBytes = 256;

// The tenant a request names outside its body (`where`: the HTTP header or gRPC metadata)
// joined with its "tenant" parameter: both given, they must agree (else INVALID_ARGUMENT).
Status MergeTenant(ParsedInfer& parsed, std::string_view named, std::string_view where);

// A W3C traceparent (Trace Context: "VV-<32 hex trace id>-<16 hex parent id>-<2 hex flags>",
// lowercase hex, neither id all zeros, version not "ff"; version 00 exactly 55 characters, a
// later version at least 55 with '-' after the flags). Valid: the trace id, which travels with
// the request to the worker and back, and `header`, the 55-character version-00 form every
// answer to the request echoes (errors too). Invalid: nullopt, and the header is ignored, as
// the specification says.
struct TraceContext {
  uint64_t trace_id_high = 0;
  uint64_t trace_id_low = 0;
  std::string header;
};
std::optional<TraceContext> ParseTraceparent(std::string_view header);
// `trace` (when set) onto the request: its id to the worker, its header for the answer.
void ApplyTrace(const std::optional<TraceContext>& trace, ParsedInfer& parsed);

// A tensor's shared_memory_region / _offset / _byte_size parameters (HTTP's and gRPC's), as
// the parsers read them: INVALID_ARGUMENT for a region without a byte size, negative values,
// or (`expected` > 0) a byte size other than the tensor's. `what`: "input 'x'" or "output 'y'".
Result<SharedTensor> SharedPlace(std::string_view what, std::string region,
                                 std::optional<int64_t> offset, std::optional<int64_t> byte_size,
                                 uint64_t expected);
// The requested outputs that go into client regions, each with its response tensor.
// INVALID_ARGUMENT for one the response lacks.
Result<std::vector<std::pair<const hookhost::ResponseTensor*, SharedTensor>>> SharedOutputs(
    const ParsedInfer& request, const hookhost::InferResponse& response);

// `header` is the JSON part, `binary` what follows it (Inference-Header-Content-Length).
// INVALID_ARGUMENT naming the tensor or field and what was expected. Fields may come in any
// order. Each thread keeps one parser for bodies up to 1 MiB; a larger body gets its own.
Result<ParsedInfer> ParseInferRequest(std::string_view header, std::string_view binary);

// A raw binary request (Inference-Header-Content-Length: 0): the body is the data of a
// single-input model's one input, one row. Every output comes back binary.
Result<ParsedInfer> ParseRawInferRequest(const Manifest& manifest, std::string_view body);

struct EncodedResponse {
  std::string body;
  size_t json_bytes = 0;  // The JSON part; == body.size() when nothing is binary.
  bool binary = false;
};

// The response: every output (or the requested ones, in that order), each as JSON data or
// a binary section; the timings as response parameters. INVALID_ARGUMENT for a requested
// output the model does not have.
Result<EncodedResponse> EncodeInferResponse(const std::string& model, int64_t version,
                                            const ParsedInfer& request,
                                            const hookhost::InferResponse& response);

nlohmann::json ServerMetadata();
nlohmann::json ModelMetadata(const Manifest& manifest);
// Triton's model configuration subset (perf_analyzer and tritonclient read it).
nlohmann::json ModelConfig(const Manifest& manifest);
// The largest compiled batch size when the client tensors are batched on axis 0, else 0.
int64_t MaxBatchSize(const Manifest& manifest);

}  // namespace ferry::frontend
